/* fuzz_offsets.h: the checks the tokenizer fuzz targets make on
 * tokenizer_encode_offsets: the ids, count and truncation of
 * tokenizer_encode, 0, 0 for the framing around the text's tokens, and each
 * token's span inside the text, counted in characters as SQLite counts them
 * (tokenizer.h). Traps on a failure.
 */
#ifndef FUZZ_OFFSETS_H
#define FUZZ_OFFSETS_H

#include <string.h>

#include "core/errors.h"
#include "tokenize/tokenizer.h"

/* Characters in s[0..n) as SQLite's length() counts them, past NUL too. */
static int fuzz_sqlite_chars(const unsigned char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; c++)
        if (s[i++] >= 0xC0)
            while (i < n && (s[i] & 0xC0) == 0x80)
                i++;
    return c;
}

/* ids[0..n) and truncated from tokenizer_encode with max_length ml; the
 * framing is `before` ids before the text's and `after` after. */
static void fuzz_check_offsets(const tokenizer *tok, const char *text, size_t len, int ml,
                               const int *ids, int n, int truncated, int before, int after)
{
    char err[SM_ERR_MAX];
    int oids[64], s[64], e[64], on = -1, otr = -1;
    int chars = fuzz_sqlite_chars((const unsigned char *)text, len);
    if (ml > 64) __builtin_trap();
    if (tokenizer_encode_offsets(tok, text, len, ml, oids, s, e, &on, &otr, NULL, NULL, err) !=
        SM_OK)
        __builtin_trap();
    if (on != n || otr != truncated || memcmp(oids, ids, (size_t)n * sizeof *ids)) __builtin_trap();
    for (int i = 0; i < n; i++) {
        int framing = i < before || i >= n - after;
        if (framing && (s[i] || e[i])) __builtin_trap();
        if (!framing && (s[i] < 0 || s[i] > e[i] || e[i] > chars)) __builtin_trap();
    }
}

#endif
