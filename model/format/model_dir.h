/* model_dir.h: the files of a Hugging Face model directory, what
 * bert_model_load_dir and bert_mlm_load_dir read before parsing:
 * config.json and the tokenizer (tokenizer.json, else vocab.txt) read
 * whole, model.safetensors mapped. Internal to model/.
 */
#ifndef SM_MODEL_DIR_H
#define SM_MODEL_DIR_H

#include <stddef.h>

#include "format/safetensors.h"

typedef struct model_dir {
    char *config; /* config.json (config_len bytes), malloc'd */
    size_t config_len;
    char *tokenizer_json; /* tokenizer.json (tokenizer_json_len bytes),
                                malloc'd, or NULL when the directory has none */
    size_t tokenizer_json_len;
    char *vocab; /* vocab.txt (vocab_len bytes), malloc'd; NULL
                                when tokenizer.json was read instead */
    size_t vocab_len;
    safetensors st; /* model.safetensors, opened */
} model_dir;

/* Reads dir's files. On failure the error names the file (and, for a
 * missing one, what to do about it); d is then still closed with
 * model_dir_close. */
int model_dir_open(const char *dir, model_dir *d, char *err);
/* The same, asking stop(user) (when not NULL) before each file: a non-zero
 * answer returns SM_ERR_INTERRUPTED with err "interrupted". */
int model_dir_open_stoppable(const char *dir, int (*stop)(void *user), void *user, model_dir *d,
                             char *err);
/* The same with only vocab.txt as the tokenizer (tokenizer.json is not
 * looked at): for the masked-language-model loader, whose models are
 * WordPiece and stored as vocab.txt. */
int model_dir_open_vocab_stoppable(const char *dir, int (*stop)(void *user), void *user,
                                   model_dir *d, char *err);
void model_dir_close(model_dir *d);

#endif
