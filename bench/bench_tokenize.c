/* bench_tokenize.c: tokenizer speed on the lines of a text file, one thread.
 *
 * Loads a tokenizer (tokenizer.json, or vocab.txt for WordPiece), reads every
 * line of the file into memory, then encodes each line as the model input
 * ([CLS]/<s> tokens [SEP]/</s>, cut to --max-length) --runs times, and prints
 * the median MB/s (bytes of UTF-8 text per second), lines/s and tokens per
 * line. bench/tokenize_peer.py times transformers' fast tokenizer on the
 * same file and prints the same line, so the two are compared side by side:
 *
 *   build/bench/bench_tokenize --tokenizer DIR/tokenizer.json --text FILE
 *   python bench/tokenize_peer.py --tokenizer DIR --text FILE
 *
 * Not a test: it asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "tokenize/tokenizer.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int main(int argc, char **argv)
{
    const char *tok_path = NULL, *text_path = NULL;
    int runs = 5, max_length = 512, lower = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tokenizer")) tok_path = argv[i + 1];
        else if (!strcmp(argv[i], "--text")) text_path = argv[i + 1];
        else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-length")) max_length = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lower")) lower = atoi(argv[i + 1]);
    }
    if (!tok_path || !text_path || runs < 1 || max_length < 2) {
        fprintf(stderr, "usage: bench_tokenize --tokenizer tokenizer.json|vocab.txt "
                        "--text FILE [--runs 5] [--max-length 512] [--lower 0|1]\n");
        return 2;
    }
    char err[SM_ERR_MAX];
    tokenizer *tok = NULL;
    int rc = ends_with(tok_path, ".json") ? tokenizer_load_json_file(tok_path, &tok, err)
                                          : tokenizer_load_file(tok_path, lower, &tok, err);
    if (rc) {
        fprintf(stderr, "bench_tokenize: %s\n", err);
        return 1;
    }
    FILE *f = fopen(text_path, "rb");
    if (!f) {
        perror(text_path);
        return 1;
    }
    size_t cap = 1 << 20, len = 0, nlines = 0, lcap = 1024;
    char *buf = malloc(cap);
    size_t *start = malloc(lcap * sizeof *start);
    char line[1 << 16];
    while (buf && start && fgets(line, sizeof line, f)) {
        size_t l = strcspn(line, "\r\n");
        if (len + l + 1 > cap) buf = realloc(buf, cap = 2 * (len + l + 1));
        if (nlines == lcap) start = realloc(start, (lcap *= 2) * sizeof *start);
        if (!buf || !start) break;
        start[nlines++] = len;
        memcpy(buf + len, line, l);
        buf[len + l] = 0;
        len += l + 1;
    }
    fclose(f);
    int *ids = malloc((size_t)max_length * sizeof *ids);
    double *secs = malloc((size_t)runs * sizeof *secs);
    if (!buf || !start || !ids || !secs) {
        fprintf(stderr, "bench_tokenize: out of memory\n");
        return 1;
    }
    size_t bytes = len - nlines, tokens = 0;
    for (int r = 0; r < runs; r++) {
        double t0 = now();
        tokens = 0;
        for (size_t i = 0; i < nlines; i++) {
            const char *s = buf + start[i];
            int n = 0, truncated = 0;
            if (tokenizer_encode(tok, s, strlen(s), max_length, ids, &n, &truncated, err)) {
                fprintf(stderr, "bench_tokenize: line %zu: %s\n", i + 1, err);
                return 1;
            }
            tokens += (size_t)n;
        }
        secs[r] = now() - t0;
    }
    qsort(secs, (size_t)runs, sizeof *secs, by_double);
    double med = secs[runs / 2];
    printf("ours: %zu lines, %.2f MB, median of %d: %.3f s, %.2f MB/s, %.0f lines/s, "
           "%.1f tokens/line\n",
           nlines, (double)bytes / 1e6, runs, med, (double)bytes / 1e6 / med,
           (double)nlines / med, (double)tokens / (double)(nlines ? nlines : 1));
    free(secs);
    free(ids);
    free(start);
    free(buf);
    tokenizer_free(tok);
    return 0;
}
