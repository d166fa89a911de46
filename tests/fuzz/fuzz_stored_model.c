/* fuzz_stored_model.c: libFuzzer target for a stored model, the values of a
 * sentiment_model_store row (config, the tokenizer: vocab text or the
 * tokenizer BLOB, safetensors BLOB) that a database from outside can hold,
 * loaded as sentiment() loads them.
 *
 * Input: config length and tokenizer length as little-endian uint32, then
 * the config, the tokenizer and the safetensors bytes. The tokenizer length's
 * top bit set means the tokenizer bytes are a tokenizer.json (the tokenizer
 * column), else a vocab.txt (the vocab column); the other 31 bits are the
 * length. When it loads, the model must have labels and a maximum length,
 * and tokenize; a model with a wide part must give finite wide logits. Built by scripts/fuzz.sh; seeds come from
 * tests/fuzz/make_model_seed.py.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "encoder/bert.h"
#include "tokenize/tokenizer.h"

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bert_model *m = NULL;
    char err[SM_ERR_MAX];
    if (size < 8) return 0;
    uint32_t tok_field = le32(data + 4);
    int is_json = (tok_field >> 31) != 0;
    size_t nc = le32(data), nv = tok_field & 0x7FFFFFFFu;
    if (nc > size - 8 || nv > size - 8 - nc) return 0;
    const char *config = (const char *)data + 8, *vocab = config + nc;
    const void *st = vocab + nv;
    size_t ns = size - 8 - nc - nv;
    bert_files f = {config, nc, is_json ? NULL : vocab, is_json ? 0 : nv,
                    is_json ? vocab : NULL, is_json ? nv : 0, st, ns};
    if (bert_model_load_files(&f, &m, err) != SM_OK) {
        if (m || !err[0]) __builtin_trap(); /* a failure returns nothing, with a message */
        return 0;
    }
    if (m->cfg.num_labels < 1 || !m->cfg.id2label || m->cfg.max_position_embeddings < 2) __builtin_trap();
    int ids[16], n = 0, truncated = 0;
    if (tokenizer_encode(m->tok, "房间很干净", strlen("房间很干净"), 16, ids, &n, &truncated, err) != SM_OK)
        __builtin_trap();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size) __builtin_trap();
    if (m->wide) {
        static const char text[] = "房间很干净  ok \xff";
        const char *texts[1] = {text};
        size_t lens[1] = {sizeof text - 1};
        float *z = calloc((size_t)m->cfg.num_labels, sizeof *z);
        if (!z) __builtin_trap();
        if (m->wide->K != m->cfg.num_labels ||
            wide_add_logits_texts(m->wide, texts, lens, 1, z, NULL, NULL, err) != SM_OK)
            __builtin_trap();
        for (int k = 0; k < m->cfg.num_labels; k++)
            if (z[k] != z[k]) __builtin_trap(); /* finite weights give no NaN */
        free(z);
    }
    bert_model_free(m);
    return 0;
}

#ifdef FUZZ_STANDALONE
#include "fuzz_standalone.h"
#endif
