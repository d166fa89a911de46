/* embed_test_util.h: the golden sentence embeddings of
 * tests/fixtures/pooling/golden.tsv (tests/fixtures/gen_embed_golden.py)
 * and the model directories they belong to, for test_pooling.c and
 * test_ext_embed.c.
 *
 * embed_golden_load reads every line: variant, encoder directory, prompt,
 * text, transformers' input ids, the embedding. embed_variant_dir makes a
 * sentence-transformers model directory for a variant under a fresh
 * temporary directory: symlinks to the encoder's config.json, vocab.txt
 * and model.safetensors, and copies of the variant's modules.json and
 * 1_Pooling/config.json when it has them ("bert_plain" has none).
 * Tests run from the repository root.
 */
#ifndef EMBED_TEST_UTIL_H
#define EMBED_TEST_UTIL_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EMBED_GOLDEN "tests/fixtures/pooling/golden.tsv"
#define EMBED_MAX_ROWS 96
#define EMBED_MAX_DIM 64
#define EMBED_MAX_IDS 80

typedef struct embed_row {
    char variant[32];
    char encoder[128];
    char *prompt, *text; /* malloc'd, NUL-terminated */
    size_t prompt_len, text_len;
    int ids[EMBED_MAX_IDS], n_ids;
    float emb[EMBED_MAX_DIM];
    int dim;
} embed_row;

typedef struct embed_golden {
    int n;
    embed_row rows[EMBED_MAX_ROWS];
} embed_golden;

static inline int embed_hexval(int c)
{
    return c <= '9' ? c - '0' : (c | 32) - 'a' + 10;
}

static inline char *embed_unhex(const char *hex, size_t *len)
{
    size_t n = strlen(hex) / 2;
    char *s = malloc(n + 1);
    for (size_t k = 0; s && k < n; k++)
        s[k] = (char)(embed_hexval(hex[2 * k]) * 16 + embed_hexval(hex[2 * k + 1]));
    if (s) s[n] = 0;
    *len = n;
    return s;
}

/* Splits line at tabs into at most n fields (empty fields kept). */
static inline int embed_fields(char *line, char **f, int n)
{
    int k = 0;
    f[k++] = line;
    for (char *p = line; *p && k < n; p++)
        if (*p == '\t') {
            *p = 0;
            f[k++] = p + 1;
        }
    return k;
}

/* 0 on success; -1 when the file cannot be read or a line is malformed. */
static inline int embed_golden_load(embed_golden *g)
{
    static char line[1 << 16];
    FILE *f = fopen(EMBED_GOLDEN, "r");
    memset(g, 0, sizeof *g);
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        char *fld[6], *save = NULL;
        line[strcspn(line, "\n")] = 0;
        if (embed_fields(line, fld, 6) != 6 || g->n >= EMBED_MAX_ROWS) {
            fclose(f);
            return -1;
        }
        embed_row *r = &g->rows[g->n++];
        snprintf(r->variant, sizeof r->variant, "%s", fld[0]);
        snprintf(r->encoder, sizeof r->encoder, "%s", fld[1]);
        r->prompt = embed_unhex(fld[2], &r->prompt_len);
        r->text = embed_unhex(fld[3], &r->text_len);
        for (char *t = strtok_r(fld[4], " ", &save); t && r->n_ids < EMBED_MAX_IDS;
             t = strtok_r(NULL, " ", &save))
            r->ids[r->n_ids++] = atoi(t);
        for (char *t = strtok_r(fld[5], " ", &save); t && r->dim < EMBED_MAX_DIM;
             t = strtok_r(NULL, " ", &save))
            r->emb[r->dim++] = strtof(t, NULL);
    }
    fclose(f);
    return g->n > 0 ? 0 : -1;
}

static inline void embed_golden_free(embed_golden *g)
{
    for (int i = 0; i < g->n; i++) {
        free(g->rows[i].prompt);
        free(g->rows[i].text);
    }
}

static inline int embed_copy_file(const char *from, const char *to)
{
    char buf[8192];
    size_t n;
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    int ok = a && b;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b) ok = fclose(b) == 0 && ok;
    return ok ? 0 : -1;
}

/* Makes the model directory of variant (encoder: its encoder directory)
 * in a new temporary directory; writes its path to out (cap >= 256).
 * Returns 0 on success. */
static inline int embed_variant_dir(const char *variant, const char *encoder, char *out,
                                    size_t cap)
{
    static const char *const files[] = {"config.json", "vocab.txt", "model.safetensors"};
    char cwd[PATH_MAX], from[PATH_MAX + 256], to[PATH_MAX + 256];
    snprintf(out, cap, "/tmp/sx_embed_XXXXXX");
    if (!mkdtemp(out) || !getcwd(cwd, sizeof cwd)) return -1;
    for (int i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s/%s/%s", cwd, encoder, files[i]);
        snprintf(to, sizeof to, "%s/%s", out, files[i]);
        if (symlink(from, to)) return -1;
    }
    snprintf(from, sizeof from, "tests/fixtures/pooling/%s/modules.json", variant);
    if (access(from, F_OK) != 0) return 0; /* no modules.json: a plain model */
    snprintf(to, sizeof to, "%s/modules.json", out);
    if (embed_copy_file(from, to)) return -1;
    snprintf(to, sizeof to, "%s/1_Pooling", out);
    if (mkdir(to, 0777)) return -1;
    snprintf(from, sizeof from, "tests/fixtures/pooling/%s/1_Pooling/config.json", variant);
    snprintf(to, sizeof to, "%s/1_Pooling/config.json", out);
    return embed_copy_file(from, to);
}

/* Removes what embed_variant_dir (and a test) made in dir: its files, one
 * level of subdirectories. */
static inline void embed_dir_remove(const char *dir)
{
    char cmd[600];
    if (strncmp(dir, "/tmp/sx_embed_", 14)) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

#endif
