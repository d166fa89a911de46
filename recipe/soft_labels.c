/* soft_labels.c: the teacher's soft labels file (format in soft_labels.h):
 * writing it from the teacher's TSV, loading and checking it, lookups by
 * binary search. Owns the arrays of the soft_labels it loads.
 */
#include "recipe/soft_labels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/errors.h"
#include "recipe/reviews.h"

static const char k_magic[8] = {'S', 'M', 'S', 'O', 'F', 'T', '1', '\n'};
#define MAX_TEXTS (64 << 20)

uint64_t soft_labels_key(const char *text)
{
    char *norm = review_normalize(text);
    if (!norm) return 0;
    uint64_t h = review_hash(norm);
    free(norm);
    return h;
}

typedef struct entry {
    uint64_t key;
    uint16_t p;
    int order; /* line number: the first of equal keys wins */
} entry;

static int by_key(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

static void put_le(unsigned char *out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) out[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *in, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)in[i] << (8 * i);
    return v;
}

int soft_labels_write_tsv(const char *tsv, const char *out, int *n_out, char *err)
{
    FILE *f = fopen(tsv, "r");
    if (!f) return sm_error(err, SM_ERR_IO, "cannot open '%s': %s", tsv, strerror(errno));
    entry *e = NULL;
    int n = 0, cap = 0, rc = SM_OK, line_no = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    while ((len = getline(&line, &line_cap, f)) > 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        char *tab = strchr(line, '\t'), *end;
        if (!tab) {
            rc = sm_error(err, SM_ERR_FORMAT, "%s:%d: expected p<TAB>text", tsv, line_no);
            break;
        }
        *tab = 0;
        double p = strtod(line, &end);
        if (end == line || *end || !(p >= 0 && p <= 1)) {
            rc = sm_error(err, SM_ERR_FORMAT, "%s:%d: '%s' is not a probability", tsv, line_no,
                          line);
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            entry *grown = cap <= MAX_TEXTS ? realloc(e, (size_t)cap * sizeof *e) : NULL;
            if (!grown) {
                rc = sm_error(err, SM_ERR_NOMEM, "out of memory reading '%s'", tsv);
                break;
            }
            e = grown;
        }
        e[n].key = soft_labels_key(tab + 1);
        e[n].p = (uint16_t)lrint(p * 65535.0);
        e[n].order = n;
        n++;
    }
    free(line);
    fclose(f);
    if (rc) {
        free(e);
        return rc;
    }
    if (n > 0) qsort(e, (size_t)n, sizeof *e, by_key); /* e is NULL when n is 0 */
    int u = 0;
    for (int i = 0; i < n; i++)
        if (!u || e[i].key != e[u - 1].key) e[u++] = e[i];
    unsigned char head[16], buf[8];
    memcpy(head, k_magic, 8);
    put_le(head + 8, (uint64_t)u, 4);
    put_le(head + 12, 0, 4);
    FILE *o = fopen(out, "wb");
    if (!o) {
        free(e);
        return sm_error(err, SM_ERR_IO, "cannot write '%s': %s", out, strerror(errno));
    }
    int ok = fwrite(head, 1, 16, o) == 16;
    for (int i = 0; i < u && ok; i++) {
        put_le(buf, e[i].key, 8);
        ok = fwrite(buf, 1, 8, o) == 8;
    }
    for (int i = 0; i < u && ok; i++) {
        put_le(buf, e[i].p, 2);
        ok = fwrite(buf, 1, 2, o) == 2;
    }
    ok = !fclose(o) && ok;
    free(e);
    if (!ok) return sm_error(err, SM_ERR_IO, "cannot write '%s'", out);
    *n_out = u;
    return SM_OK;
}

int soft_labels_load(const char *path, soft_labels *s, char *err)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "rb");
    if (!f) return sm_error(err, SM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    unsigned char head[16];
    int rc = SM_OK;
    long size = -1;
    struct stat sb;
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
        rc = sm_error(err, SM_ERR_IO, "'%s' is not a regular file", path);
        goto end;
    }
    if (fread(head, 1, 16, f) != 16 || memcmp(head, k_magic, 8) || get_le(head + 12, 4)) {
        rc = sm_error(err, SM_ERR_FORMAT, "'%s' is not a soft labels file", path);
        goto end;
    }
    uint64_t n = get_le(head + 8, 4);
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (n > MAX_TEXTS || size != (long)(16 + 10 * n)) {
        rc = sm_error(err, SM_ERR_FORMAT, "'%s': %llu texts but %ld bytes", path,
                      (unsigned long long)n, size);
        goto end;
    }
    fseek(f, 16, SEEK_SET);
    unsigned char *raw = malloc(10 * n + 1);
    s->key = malloc(n * sizeof *s->key + 1);
    s->p = malloc(n * sizeof *s->p + 1);
    if (!raw || !s->key || !s->p) {
        free(raw);
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory loading '%s'", path);
        goto end;
    }
    if (fread(raw, 1, 10 * n, f) != 10 * n) {
        free(raw);
        rc = sm_error(err, SM_ERR_IO, "cannot read '%s'", path);
        goto end;
    }
    for (uint64_t i = 0; i < n; i++) {
        s->key[i] = get_le(raw + 8 * i, 8);
        s->p[i] = (uint16_t)get_le(raw + 8 * n + 2 * i, 2);
        if (i && s->key[i] <= s->key[i - 1]) {
            rc = sm_error(err, SM_ERR_FORMAT, "'%s': keys out of order at %llu", path,
                          (unsigned long long)i);
            break;
        }
    }
    free(raw);
    s->n = (int)n;
end:
    fclose(f);
    if (rc) soft_labels_free(s);
    return rc;
}

int soft_labels_find(const soft_labels *s, const char *text, float *p)
{
    uint64_t k = soft_labels_key(text);
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (s->key[mid] < k) lo = mid + 1;
        else hi = mid;
    }
    if (lo == s->n || s->key[lo] != k) return 0;
    *p = s->p[lo] / 65535.0f;
    return 1;
}

void soft_labels_free(soft_labels *s)
{
    free(s->key);
    free(s->p);
    memset(s, 0, sizeof *s);
}
