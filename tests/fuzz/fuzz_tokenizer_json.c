/* fuzz_tokenizer_json.c: libFuzzer target for the tokenizer.json loader and
 * the pipeline it builds (model/tokenize/tokenizer_json.c).
 *
 * The input is the file. When it loads, every id must map to a token that
 * looks itself up to the same id, and tokenizing a few fixed strings and the
 * input's own bytes must give ids in range, with the post-processor's ids
 * around them in tokenizer_encode, and the same ids with spans inside the
 * text from tokenizer_encode_offsets. Built by scripts/fuzz.sh; with
 * -DFUZZ_STANDALONE it is a plain program that runs the files named on its
 * command line.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "fuzz_offsets.h"
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
        if (n < 0 || n > 64) __builtin_trap();
        if (tokenizer_cls_id(tok) >= 0 && ids[0] != tokenizer_cls_id(tok)) __builtin_trap();
        for (int i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= v) __builtin_trap();
        /* the framing's 0, 0 lies inside the text too */
        fuzz_check_offsets(tok, text, len, 64, ids, n, truncated, 0, 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const texts[] = {
        "房间很干净", "Hello, WORLD!  naïve café", "ＡＢＣ　１２３ ｶﾞ", "👍🏽 👨‍👩‍👧",
        "<s> </s> [CLS] <mask>", "a\tb\n\x01\xff\xc3", ""
    };
    tokenizer *tok = NULL;
    char err[SM_ERR_MAX];
    if (tokenizer_load_json_buffer((const char *)data, size, &tok, err) != SM_OK) {
        if (tok || !err[0]) __builtin_trap(); /* a failure returns nothing, with a message */
        return 0;
    }
    int v = tokenizer_vocab_size(tok);
    if (v < 1) __builtin_trap();
    for (int id = 0; id < v; id++) {
        const char *t = tokenizer_token(tok, id);
        if (!t) __builtin_trap();
        if (tokenizer_lookup(tok, t, strlen(t)) != id) __builtin_trap();
    }
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) check_ids(tok, texts[i], strlen(texts[i]));
    check_ids(tok, (const char *)data, size < 4096 ? size : 4096);
    tokenizer_free(tok);
    return 0;
}

#ifdef FUZZ_STANDALONE
#include "fuzz_standalone.h"
#endif
