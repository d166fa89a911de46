/* fuzz_vocab.c: libFuzzer target for the vocab.txt parser (a file, or the
 * vocab column of a stored model).
 *
 * The first byte chooses do_lower_case; the rest is the vocabulary. When it
 * loads, every id must map to a token that looks itself up to an id of the
 * same text, and tokenizing the vocabulary's own bytes and a few fixed
 * strings must give ids in range. Built by scripts/fuzz.sh; with
 * -DFUZZ_STANDALONE it is a plain program that runs the files named on its
 * command line.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "tokenize/tokenizer.h"

static void check_ids(const tokenizer *tok, const char *text, size_t len)
{
    char err[SM_ERR_MAX];
    int ids[64], n = 0, truncated = 0, total = 0;
    int v = tokenizer_vocab_size(tok);
    if (tokenizer_tokenize(tok, text, len, ids, 64, &total, err) == SM_OK) {
        for (int i = 0; i < (total < 64 ? total : 64); i++)
            if (ids[i] < 0 || ids[i] >= v) __builtin_trap();
    }
    if (tokenizer_encode(tok, text, len, 64, ids, &n, &truncated, err) == SM_OK) {
        if (n < 2 || n > 64 || ids[0] != tokenizer_cls_id(tok) || ids[n - 1] != tokenizer_sep_id(tok))
            __builtin_trap();
        for (int i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= v) __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const texts[] = {"房间很干净", "Hello, WORLD! ünïcödé", "##", "[UNK] [CLS]", ""};
    tokenizer *tok = NULL;
    char err[SM_ERR_MAX];
    if (size < 1) return 0;
    if (tokenizer_load_buffer((const char *)data + 1, size - 1, data[0] & 1, &tok, err) != SM_OK) {
        if (tok || !err[0]) __builtin_trap(); /* a failure returns nothing, with a message */
        return 0;
    }
    int v = tokenizer_vocab_size(tok);
    if (v < 4) __builtin_trap(); /* [CLS] [SEP] [PAD] [UNK] at least */
    for (int id = 0; id < v; id++) {
        const char *t = tokenizer_token(tok, id);
        if (!t) __builtin_trap();
        int back = tokenizer_lookup(tok, t, strlen(t));
        if (back < 0 || back >= v || strcmp(tokenizer_token(tok, back), t)) __builtin_trap();
    }
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) check_ids(tok, texts[i], strlen(texts[i]));
    check_ids(tok, (const char *)data + 1, size - 1);
    tokenizer_free(tok);
    return 0;
}

#ifdef FUZZ_STANDALONE
#include "fuzz_standalone.h"
#endif
