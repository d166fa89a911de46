/* model_dir.c: reading a model directory's config.json and vocab.txt into
 * memory and opening its model.safetensors. Owns those three until
 * model_dir_close.
 */
#include "model_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

/* Reads a whole file into a malloc'd buffer. */
static int read_file(const char *path, char **data, size_t *len, char *err)
{
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return sm_error(err, SM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return sm_error(err, SM_ERR_NOMEM, "out of memory reading '%s'", path);
            }
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return sm_error(err, SM_ERR_IO, "error reading '%s'", path);
    }
    *data = buf;
    *len = n;
    return SM_OK;
}

int model_dir_open(const char *dir, model_dir *d, char *err)
{
    char path[4096];
    int rc;
    memset(d, 0, sizeof *d);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((rc = read_file(path, &d->config, &d->config_len, err))) return rc;
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    if ((rc = read_file(path, &d->vocab, &d->vocab_len, err))) return rc;
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
