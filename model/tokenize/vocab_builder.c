/* vocab_builder.c: counts basic-tokenizer words and characters in training
 * texts and writes a deterministic WordPiece vocabulary (vocab_builder.h).
 *
 * Owns one open-addressing hash table of strings with counts; utf8proc does
 * the Unicode work (categories, lower-casing, decomposition).
 */
#include "tokenize/vocab_builder.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/errors.h"

typedef struct entry {
    char *key; /* NUL-terminated UTF-8; NULL = empty slot */
    size_t len;
    long count; /* as a word (or, for chars, as any character) */
    long inner; /* chars only: times seen after the first position of a word */
    int n_chars;
} entry;

typedef struct table {
    entry *slots;
    size_t cap, used;
} table;

struct vocab_builder {
    int lower;
    table words, chars;
    char *word; /* the word being assembled */
    size_t word_len, word_cap;
    int word_chars;
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void table_free(table *t)
{
    for (size_t i = 0; i < t->cap; i++) free(t->slots[i].key);
    free(t->slots);
}

static int table_grow(table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    entry *s = calloc(cap, sizeof *s);
    if (!s) return SM_ERR_NOMEM;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].key) continue;
        size_t j = hash_bytes(t->slots[i].key, t->slots[i].len) & (cap - 1);
        while (s[j].key) j = (j + 1) & (cap - 1);
        s[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = s;
    t->cap = cap;
    return SM_OK;
}

/* The entry for key, created with count 0 when new; NULL on no memory. */
static entry *table_get(table *t, const char *key, size_t len)
{
    if ((t->used + 1) * 2 > t->cap && table_grow(t)) return NULL;
    size_t j = hash_bytes(key, len) & (t->cap - 1);
    while (t->slots[j].key) {
        if (t->slots[j].len == len && !memcmp(t->slots[j].key, key, len)) return &t->slots[j];
        j = (j + 1) & (t->cap - 1);
    }
    char *k = malloc(len + 1);
    if (!k) return NULL;
    memcpy(k, key, len);
    k[len] = 0;
    t->slots[j] = (entry){k, len, 0, 0, 0};
    t->used++;
    return &t->slots[j];
}

static const entry *table_find(const table *t, const char *key, size_t len)
{
    if (!t->cap) return NULL;
    size_t j = hash_bytes(key, len) & (t->cap - 1);
    while (t->slots[j].key) {
        if (t->slots[j].len == len && !memcmp(t->slots[j].key, key, len)) return &t->slots[j];
        j = (j + 1) & (t->cap - 1);
    }
    return NULL;
}

int vocab_builder_create(int do_lower_case, vocab_builder **out, char *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return sm_error(err, SM_ERR_NOMEM, "out of memory creating a vocabulary builder");
    (*out)->lower = do_lower_case;
    return SM_OK;
}

void vocab_builder_free(vocab_builder *vb)
{
    if (!vb) return;
    table_free(&vb->words);
    table_free(&vb->chars);
    free(vb->word);
    free(vb);
}

/* BertTokenizer's _is_chinese_char ranges. */
static int is_cjk(utf8proc_int32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static int is_punct(utf8proc_int32_t c)
{
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
        (c >= 123 && c <= 126))
        return 1;
    utf8proc_category_t cat = utf8proc_category(c);
    return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

static int is_space(utf8proc_int32_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
           utf8proc_category(c) == UTF8PROC_CATEGORY_ZS;
}

static int is_control(utf8proc_int32_t c)
{
    if (c == '\t' || c == '\n' || c == '\r') return 0;
    utf8proc_category_t cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF;
}

/* Ends the current word: counts it and its characters. */
static int flush_word(vocab_builder *vb)
{
    if (!vb->word_len) return SM_OK;
    entry *e = table_get(&vb->words, vb->word, vb->word_len);
    if (!e) return SM_ERR_NOMEM;
    e->count++;
    e->n_chars = vb->word_chars;
    size_t at = 0;
    int pos = 0;
    while (at < vb->word_len) {
        utf8proc_int32_t c;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)vb->word + at,
                                              (utf8proc_ssize_t)(vb->word_len - at), &c);
        if (n <= 0) break;
        entry *ce = table_get(&vb->chars, vb->word + at, (size_t)n);
        if (!ce) return SM_ERR_NOMEM;
        ce->count++;
        if (pos++) ce->inner++;
        at += (size_t)n;
    }
    vb->word_len = 0;
    vb->word_chars = 0;
    return SM_OK;
}

static int push_cp(vocab_builder *vb, utf8proc_int32_t c)
{
    if (vb->word_len + 4 > vb->word_cap) {
        size_t cap = vb->word_cap ? vb->word_cap * 2 : 64;
        char *w = realloc(vb->word, cap);
        if (!w) return SM_ERR_NOMEM;
        vb->word = w;
        vb->word_cap = cap;
    }
    vb->word_len += (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)vb->word + vb->word_len);
    vb->word_chars++;
    return SM_OK;
}

int vocab_builder_add(vocab_builder *vb, const char *text, size_t len, char *err)
{
    size_t at = 0;
    int rc = SM_OK;
    while (at < len && !rc) {
        utf8proc_int32_t c;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)text + at,
                                              (utf8proc_ssize_t)(len - at), &c);
        if (n <= 0) { /* invalid byte: skip it */
            at++;
            continue;
        }
        at += (size_t)n;
        if (c == 0 || c == 0xFFFD || is_control(c)) continue;
        if (is_space(c)) {
            rc = flush_word(vb);
            continue;
        }
        utf8proc_int32_t cps[8];
        int ncp = 1;
        cps[0] = c;
        if (vb->lower) {
            c = utf8proc_tolower(c);
            int last = 0;
            utf8proc_ssize_t m = utf8proc_decompose_char(c, cps, 8, UTF8PROC_DECOMPOSE, &last);
            ncp = m > 0 && m <= 8 ? (int)m : (cps[0] = c, 1);
        }
        for (int i = 0; i < ncp && !rc; i++) {
            utf8proc_int32_t d = cps[i];
            if (vb->lower && utf8proc_category(d) == UTF8PROC_CATEGORY_MN) continue;
            if (is_cjk(d) || is_punct(d)) {
                if (!(rc = flush_word(vb)) && !(rc = push_cp(vb, d))) rc = flush_word(vb);
            } else {
                rc = push_cp(vb, d);
            }
        }
    }
    if (!rc) rc = flush_word(vb);
    if (rc) return sm_error(err, SM_ERR_NOMEM, "out of memory counting vocabulary");
    return SM_OK;
}

typedef struct cand {
    const char *s;
    size_t len;
    long count;
    int cont; /* "##" form */
} cand;

static int by_count(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

int vocab_builder_build(const vocab_builder *vb, int min_count, int max_size, char **vocab,
                        size_t *len, int *n_tokens, char *err)
{
    static const char *const specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    *vocab = NULL;
    *len = 0;
    *n_tokens = 0;
    if (min_count < 1)
        return sm_error(err, SM_ERR_INVALID, "min_count %d: expected >= 1", min_count);
    if (max_size != 0 && max_size < 5)
        return sm_error(err, SM_ERR_INVALID, "vocabulary size %d: expected >= 5", max_size);
    size_t limit = max_size ? (size_t)max_size : SIZE_MAX;
    size_t nc = 0, nw = 0;
    cand *chars = malloc((2 * vb->chars.used + 1) * sizeof *chars);
    cand *words = malloc((vb->words.used + 1) * sizeof *words);
    if (!chars || !words) goto nomem;
    for (size_t i = 0; i < vb->chars.cap; i++) {
        const entry *e = &vb->chars.slots[i];
        if (!e->key || e->count < min_count) continue;
        chars[nc++] = (cand){e->key, e->len, e->count, 0};
    }
    qsort(chars, nc, sizeof *chars, by_count);
    /* continuation forms after every plain character, ordered the same way */
    size_t ncont = 0;
    cand *cont = chars + nc;
    for (size_t i = 0; i < nc; i++) {
        const entry *e = table_find(&vb->chars, chars[i].s, chars[i].len);
        if (e && e->inner >= min_count) cont[ncont++] = (cand){e->key, e->len, e->inner, 1};
    }
    qsort(cont, ncont, sizeof *cont, by_count);
    for (size_t i = 0; i < vb->words.cap; i++) {
        const entry *e = &vb->words.slots[i];
        if (!e->key || e->count < min_count || e->n_chars < 2) continue;
        words[nw++] = (cand){e->key, e->len, e->count, 0};
    }
    qsort(words, nw, sizeof *words, by_count);

    size_t cap = 64, used = 0, count = 0;
    for (size_t i = 0; i < nc + ncont; i++) cap += chars[i].len + 4;
    for (size_t i = 0; i < nw; i++) cap += words[i].len + 1;
    char *out = malloc(cap);
    if (!out) goto nomem;
#define EMIT(pre, s, n)                       \
    do {                                      \
        if (count >= limit) break;            \
        memcpy(out + used, pre, strlen(pre)); \
        used += strlen(pre);                  \
        memcpy(out + used, s, n);             \
        used += (n);                          \
        out[used++] = '\n';                   \
        count++;                              \
    } while (0)
    for (size_t i = 0; i < 5; i++) EMIT("", specials[i], strlen(specials[i]));
    for (size_t i = 0; i < nc; i++) EMIT("", chars[i].s, chars[i].len);
    for (size_t i = 0; i < ncont; i++) EMIT("##", cont[i].s, cont[i].len);
    for (size_t i = 0; i < nw; i++) EMIT("", words[i].s, words[i].len);
#undef EMIT
    out[used] = 0;
    free(chars);
    free(words);
    *vocab = out;
    *len = used;
    *n_tokens = (int)count;
    return SM_OK;
nomem:
    free(chars);
    free(words);
    return sm_error(err, SM_ERR_NOMEM, "out of memory building the vocabulary");
}
