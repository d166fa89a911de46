/* golden_ids_util.h: reading the golden token-id files of the tokenizer
 * tests (test_tokenizer.c, test_tokenizer_json.c): a whole file, hex-encoded
 * input strings and "1 2 3" / "-" id lists, and printing ids on a mismatch.
 */
#ifndef GOLDEN_IDS_UTIL_H
#define GOLDEN_IDS_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file's bytes, NUL-terminated (malloc'd), or NULL. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    *len = buf ? (size_t)n : 0;
    return buf;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Parses "1 2 3" or "-" into ids; returns count, -1 on a bad field. */
static int parse_ids(const char *f, int *ids, int cap)
{
    int n = 0;
    if (strcmp(f, "-") == 0)
        return 0;
    while (*f) {
        char *end;
        long v = strtol(f, &end, 10);
        if (end == f || n >= cap)
            return -1;
        ids[n++] = (int)v;
        f = end;
        while (*f == ' ')
            f++;
    }
    return n;
}

/* The first 64 ids, for a failure message. */
static void print_ids(const char *label, const int *ids, int n)
{
    fprintf(stderr, "    %s (%d):", label, n);
    for (int i = 0; i < n && i < 64; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "%s\n", n > 64 ? " ..." : "");
}

#endif
