/* model_dir.h: the files of a Hugging Face model directory, what
 * bert_model_load_dir and bert_mlm_load_dir read before parsing:
 * config.json and vocab.txt read whole, model.safetensors mapped.
 * Internal to model/.
 */
#ifndef SM_MODEL_DIR_H
#define SM_MODEL_DIR_H

#include <stddef.h>

#include "safetensors.h"

typedef struct model_dir {
    char *config;            /* config.json (config_len bytes), malloc'd */
    size_t config_len;
    char *vocab;             /* vocab.txt (vocab_len bytes), malloc'd */
    size_t vocab_len;
    safetensors st;          /* model.safetensors, opened */
} model_dir;

/* Reads dir's three files. On failure the error names the file; d is then
 * still closed with model_dir_close. */
int model_dir_open(const char *dir, model_dir *d, char *err);
/* The same, asking stop(user) (when not NULL) before each file: a non-zero
 * answer returns SM_ERR_INTERRUPTED with err "interrupted". */
int model_dir_open_stoppable(const char *dir, int (*stop)(void *user), void *user,
                             model_dir *d, char *err);
void model_dir_close(model_dir *d);

#endif
