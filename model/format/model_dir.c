/* model_dir.c: reading a model directory's config.json and tokenizer into
 * memory and opening its model.safetensors, each through file_read.h
 * (regular files only, size caps). Owns those files until model_dir_close.
 *
 * The tokenizer is tokenizer.json when the directory has one (whatever else
 * it has: vocab.txt, sentencepiece.bpe.model), else vocab.txt. tokenizer.json
 * is preferred because it is what transformers runs: AutoTokenizer loads the
 * fast tokenizer from tokenizer.json whenever it is present, and the file
 * holds the whole pipeline (normalizer, pre-tokenizer, model, added tokens,
 * post-processor), where vocab.txt holds only the pieces and leaves casing,
 * accent stripping and Chinese-character splitting to tokenizer_config.json,
 * which we do not read (config.json's do_lower_case, default true, stands in
 * for it). A BERT repository that ships only tokenizer.json (WordPiece) loads
 * the same way. An entry named tokenizer.json that is not a regular file is
 * an error, never a reason to fall back to vocab.txt.
 *
 * A missing file is an error that says what to do: sentencepiece.bpe.model
 * alone is converted to tokenizer.json by transformers, pytorch_model.bin to
 * model.safetensors by torch + safetensors (one-line commands below).
 */
#include "format/model_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/errors.h"
#include "format/file_read.h"

int model_dir_open(const char *dir, model_dir *d, char *err)
{
    return model_dir_open_stoppable(dir, NULL, NULL, d, err);
}

#define STOP_POINT()                                                                     \
    do {                                                                                 \
        if (stop && stop(user)) return sm_error(err, SM_ERR_INTERRUPTED, "interrupted"); \
    } while (0)

/* 1 when dir has an entry called name, of any kind (a FIFO or a directory
 * counts: reading it then gives file_read.h's error for it). */
static int has_entry(const char *dir, const char *name)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lstat(path, &sb) == 0;
}

static int read_tokenizer(const char *dir, int json_allowed, model_dir *d, char *err)
{
    char path[4096];
    if (json_allowed && has_entry(dir, "tokenizer.json")) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        return sm_file_read(path, SM_FILE_MAX_VOCAB, &d->tokenizer_json, &d->tokenizer_json_len,
                            err);
    }
    if (!has_entry(dir, "vocab.txt")) {
        if (json_allowed && has_entry(dir, "sentencepiece.bpe.model"))
            return sm_error(err, SM_ERR_IO,
                            "%s has sentencepiece.bpe.model but no tokenizer.json; make one "
                            "with: python -c \"from transformers import AutoTokenizer; "
                            "AutoTokenizer.from_pretrained('%s').save_pretrained('%s')\"",
                            dir, dir, dir);
        if (json_allowed)
            return sm_error(err, SM_ERR_IO,
                            "%s has no tokenizer: expected tokenizer.json or "
                            "vocab.txt",
                            dir);
    }
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    return sm_file_read(path, SM_FILE_MAX_VOCAB, &d->vocab, &d->vocab_len, err);
}

static int open_weights(const char *dir, model_dir *d, char *err)
{
    char path[4096];
    if (!has_entry(dir, "model.safetensors") && has_entry(dir, "pytorch_model.bin"))
        return sm_error(err, SM_ERR_IO,
                        "%s has pytorch_model.bin but no model.safetensors; convert it with: "
                        "python -c \"import torch; from safetensors.torch import save_file; "
                        "sd = torch.load('%s/pytorch_model.bin', map_location='cpu'); "
                        "save_file({k: v.contiguous().clone() for k, v in sd.items()}, "
                        "'%s/model.safetensors', metadata={'format': 'pt'})\"",
                        dir, dir, dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return safetensors_open_file(path, &d->st, err);
}

static int open_dir(const char *dir, int json_allowed, int (*stop)(void *user), void *user,
                    model_dir *d, char *err)
{
    char path[4096];
    int rc;
    memset(d, 0, sizeof *d);
    STOP_POINT();
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((rc = sm_file_read(path, SM_FILE_MAX_CONFIG, &d->config, &d->config_len, err))) return rc;
    STOP_POINT();
    if ((rc = read_tokenizer(dir, json_allowed, d, err))) return rc;
    STOP_POINT();
    return open_weights(dir, d, err);
}

int model_dir_open_stoppable(const char *dir, int (*stop)(void *user), void *user, model_dir *d,
                             char *err)
{
    return open_dir(dir, 1, stop, user, d, err);
}

int model_dir_open_vocab_stoppable(const char *dir, int (*stop)(void *user), void *user,
                                   model_dir *d, char *err)
{
    return open_dir(dir, 0, stop, user, d, err);
}

void model_dir_close(model_dir *d)
{
    safetensors_close(&d->st);
    free(d->config);
    free(d->tokenizer_json);
    free(d->vocab);
    d->config = d->tokenizer_json = d->vocab = NULL;
}
