/* fuzz_tokenize.c: libFuzzer target for the tokenizer on text from outside
 * (any bytes a SQL value can hold: invalid UTF-8, NUL, control characters,
 * huge runs of one character).
 *
 * Tokenizes the input with tests/fixtures/vocab.txt, with and without
 * lower-casing: every id in range, the full count independent of the
 * buffer's size, encode() giving [CLS] ... [SEP] with truncation said, and
 * encode_offsets() the same ids with spans inside the text.
 * Run from the repository root. Built by scripts/fuzz.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "fuzz_offsets.h"
#include "tokenize/tokenizer.h"

static tokenizer *g_tok[2];

static void init(void)
{
    char err[SM_ERR_MAX];
    for (int lower = 0; lower < 2; lower++)
        if (tokenizer_load_file("tests/fixtures/vocab.txt", lower, &g_tok[lower], err) != SM_OK) {
            fprintf(stderr, "fuzz_tokenize: %s (run from the repository root)\n", err);
            abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[SM_ERR_MAX];
    int small[8], big[512], n, truncated, total_small, total_big;
    if (!g_tok[0]) init();
    for (int lower = 0; lower < 2; lower++) {
        const tokenizer *tok = g_tok[lower];
        int v = tokenizer_vocab_size(tok);
        if (tokenizer_tokenize(tok, (const char *)data, size, small, 8, &total_small, err) != SM_OK ||
            tokenizer_tokenize(tok, (const char *)data, size, big, 512, &total_big, err) != SM_OK)
            __builtin_trap(); /* any bytes tokenize */
        if (total_small != total_big) __builtin_trap();
        for (int i = 0; i < (total_big < 512 ? total_big : 512); i++) {
            if (big[i] < 0 || big[i] >= v) __builtin_trap();
            if (i < 8 && small[i] != big[i]) __builtin_trap();
        }
        if (tokenizer_encode(tok, (const char *)data, size, 32, big, &n, &truncated, err) != SM_OK)
            __builtin_trap();
        if (n != (total_big + 2 < 32 ? total_big + 2 : 32) || truncated != (total_big > 30) ||
            big[0] != tokenizer_cls_id(tok) || big[n - 1] != tokenizer_sep_id(tok))
            __builtin_trap();
        fuzz_check_offsets(tok, (const char *)data, size, 32, big, n, truncated, 1, 1);
    }
    return 0;
}

#ifdef FUZZ_STANDALONE
#include "fuzz_standalone.h"
#endif
