/* pooling.h: how an encoder's last hidden states become one sentence
 * embedding, as sentence-transformers' Pooling and Normalize modules do it,
 * and where that setting comes from and goes to.
 *
 * A model directory in the sentence-transformers layout has, next to
 * config.json and model.safetensors:
 *
 *   modules.json              [{"type": "sentence_transformers.models.Transformer", "path": ""},
 *                              {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"},
 *                              {"type": "sentence_transformers.models.Normalize", "path": "2_Normalize"}]
 *   1_Pooling/config.json     {"word_embedding_dimension": 384,
 *                              "pooling_mode_cls_token": false,
 *                              "pooling_mode_mean_tokens": true, ...}
 *
 * Supported: one Transformer module (first, its files in the directory
 * itself), one Pooling module whose config sets exactly one of
 * pooling_mode_cls_token (the last hidden state of the first token, [CLS]
 * or <s>; not the pooler's dense + tanh) and pooling_mode_mean_tokens (the
 * mean of the last hidden states of every non-padding token, [CLS] and
 * [SEP] included: sum(h * mask) / sum(mask)), and an optional Normalize
 * module after it (L2 normalisation, x / max(||x||, 1e-12), as
 * torch.nn.functional.normalize). Anything else (max, mean-sqrt-len,
 * weighted-mean or last-token pooling, several modes at once,
 * include_prompt false, a Dense or other module) is an SM_ERR_UNSUPPORTED
 * error naming it. Both files are read through file_read.h (regular files,
 * at most SM_FILE_MAX_CONFIG) and parsed with json_in.h.
 *
 * A model without modules.json has the default: mean pooling without
 * normalisation, what sentence-transformers builds for a plain Hugging
 * Face model.
 *
 * A stored or saved model keeps its setting in its config.json under our
 * own key (transformers ignores unknown keys):
 *
 *   "embedding_pooling": {"mode": "mean", "normalize": true}
 *
 * written by bert_config_to_json when `set`, read by bert_config_parse
 * (sm_pooling_from_json); sm_pooling_files gives modules.json and
 * 1_Pooling/config.json back for an export. Owns nothing: sm_pooling is a
 * plain value.
 */
#ifndef SM_POOLING_H
#define SM_POOLING_H

#include <stddef.h>

#include "format/json_in.h"

typedef enum sm_pool_mode {
    SM_POOL_MEAN = 0, /* mean of the non-padding tokens' last hidden states */
    SM_POOL_CLS = 1   /* the first token's last hidden state */
} sm_pool_mode;

typedef struct sm_pooling {
    int set; /* 1: given by modules.json or a stored config, written back */
    sm_pool_mode mode;
    int normalize; /* L2-normalise after pooling (a Normalize module) */
    int dim;       /* 1_Pooling's word_embedding_dimension (0: not given) */
} sm_pooling;

/* The directory names sentence-transformers gives the two modules. */
#define SM_POOLING_DIR "1_Pooling"
#define SM_NORMALIZE_DIR "2_Normalize"

/* Most modules a modules.json may list (real ones have 2 to 4). */
#define SM_POOLING_MAX_MODULES 16

/* The default: mean pooling, no normalisation, set 0. */
void sm_pooling_default(sm_pooling *p);
/* "mean" or "cls". */
const char *sm_pool_mode_name(sm_pool_mode mode);

/* Reads dir/modules.json and the Pooling module's config.json. *found is 0
 * (and *out the default) when dir has no modules.json; 1 when both were
 * read. Any other problem (a file that is not a regular file or too large,
 * bad JSON, a wrong type, an unsupported mode or module) is an error
 * naming the file and the key. */
int sm_pooling_read_dir(const char *dir, sm_pooling *out, int *found, char *err);
/* The files of dir that sm_pooling_read_dir reads, relative to dir, for a
 * cache identity: "modules.json" and, when modules.json names a Pooling
 * module, its config.json ("1_Pooling/config.json") in pool_file (cap >=
 * 96), else "" there. Errors (unreadable or bad modules.json) give "" too:
 * the loader reports them. */
void sm_pooling_files_of_dir(const char *dir, char *pool_file, size_t cap);

/* modules.json text: the Pooling module's path (pool_path, cap bytes) and
 * whether a Normalize module follows it. */
int sm_pooling_parse_modules(const char *json, size_t len, char *pool_path, size_t cap,
                             int *normalize, char *err);
/* 1_Pooling/config.json text into out (mode, dim; set and normalize are
 * left as they are). `file` names it in errors. */
int sm_pooling_parse_config(const char *json, size_t len, const char *file, sm_pooling *out,
                            char *err);
/* config.json's "embedding_pooling" value (v not NULL) into out, set 1. */
int sm_pooling_from_json(const json_in_value *v, sm_pooling *out, char *err);

/* modules.json and 1_Pooling/config.json text (malloc'd, NUL-terminated)
 * for p on a hidden-size encoder, as sentence-transformers writes them. */
int sm_pooling_files(const sm_pooling *p, int hidden, char **modules_json, char **pooling_json,
                     char *err);

/* One sequence's embedding: hidden(T, C) row-major, the first `length`
 * rows real tokens (length >= 1), out(C). */
void sm_pool_sequence(const sm_pooling *p, const float *hidden, int length, int C, float *out);

#endif
