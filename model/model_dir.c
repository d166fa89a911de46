/* model_dir.c: reading a model directory's config.json and vocab.txt into
 * memory and opening its model.safetensors, each through file_read.h (regular
 * files only, size caps). Owns those three until model_dir_close.
 */
#include "model_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "file_read.h"

int model_dir_open(const char *dir, model_dir *d, char *err)
{
    return model_dir_open_stoppable(dir, NULL, NULL, d, err);
}

#define STOP_POINT()                                                          \
    do {                                                                      \
        if (stop && stop(user)) return sm_error(err, SM_ERR_INTERRUPTED, "interrupted"); \
    } while (0)

int model_dir_open_stoppable(const char *dir, int (*stop)(void *user), void *user,
                             model_dir *d, char *err)
{
    char path[4096];
    int rc;
    memset(d, 0, sizeof *d);
    STOP_POINT();
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((rc = sm_file_read(path, SM_FILE_MAX_CONFIG, &d->config, &d->config_len, err))) return rc;
    STOP_POINT();
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    if ((rc = sm_file_read(path, SM_FILE_MAX_VOCAB, &d->vocab, &d->vocab_len, err))) return rc;
    STOP_POINT();
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return safetensors_open_file(path, &d->st, err);
}

void model_dir_close(model_dir *d)
{
    safetensors_close(&d->st);
    free(d->config);
    free(d->vocab);
    d->config = d->vocab = NULL;
}
