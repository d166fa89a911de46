/* tokenizer_json.c: the Hugging Face tokenizers pipeline read from a
 * tokenizer.json, id for id with the Rust `tokenizers` library (what
 * transformers' XLMRobertaTokenizerFast / BertTokenizerFast run).
 *
 * Owns the pipeline (tj_pipeline: the normalizer and pre-tokenizer steps,
 * the model settings, the added tokens, the post-processor ids, the decoded
 * Precompiled charsmap). The vocabulary is a vocab (vocab.c), which tj_load
 * builds from the model's pieces and hands back with the pipeline;
 * tokenizer.c wraps the two in its one opaque tokenizer type, so every
 * caller of tokenizer_encode / tokenizer_token keeps working and a model
 * never needs to know which file its tokenizer came from. (A second public
 * type would have doubled every call site in bert, ext and the trainers for
 * no gain; the pipeline is immutable after loading and shared by threads
 * like the vocabulary.) Calls vocab.h, utf8.h, json_in.h, errors.h and
 * utf8proc; never tokenizer.h, which is the caller.
 *
 * Supported, everything else is an error naming the component:
 *   model          Unigram (Viterbi over the pieces and their scores, the
 *                  unk id, consecutive unknowns fused, byte_fallback),
 *                  WordPiece (greedy longest match, continuing prefix,
 *                  max_input_chars_per_word)
 *   normalizer     Precompiled (sentencepiece charsmap), Replace (String
 *                  patterns; Regex patterns of one literal character with
 *                  + or {n,}), Strip, NFC, NFD, NFKC, NFKD, Lowercase,
 *                  BertNormalizer, Sequence
 *   pre_tokenizer  Metaspace (replacement, prepend_scheme always / first /
 *                  never or the older add_prefix_space, split),
 *                  WhitespaceSplit, BertPreTokenizer, Sequence
 *   post_processor TemplateProcessing (single sequence), BertProcessing,
 *                  RobertaProcessing, none
 *   added_tokens   matched in the raw text, leftmost longest, with lstrip and
 *                  rstrip (normalized=false and single_word=false only)
 * Invalid UTF-8 is repaired first (utf8.h's utf8_next: one U+FFFD per
 * maximal invalid subpart, as Python's errors="replace"), then the text runs
 * added-token split -> normalizer -> pre-tokenizer -> model -> template.
 *
 * Cost: linear in the text. The models walk the vocabulary's byte trie
 * (vocab_trie_next): Unigram finds every piece starting at a place in one
 * walk, WordPiece the longest, so a place costs at most the longest
 * piece's length in steps, and a piece or added token longer than
 * TJ_MAX_PIECE (1024 bytes) is refused at load, naming it. Every pass
 * counts its bytes and asks the caller's stop check (tj_tokenize's stop)
 * about every TJ_POLL_BYTES; normalizers run over pieces of the text cut
 * where each step gives the same text (chunk_end), and a segment is
 * tokenized in parts cut where the whole pipeline does (segment_parts),
 * so tj_encode stops once it has max_length ids where the text allows a
 * cut (a space, or ideographs under a BertNormalizer); a text without
 * such a place (Chinese without spaces under Metaspace) is normalized
 * whole, as Viterbi needs the whole piece.
 *
 * Offsets (tj_encode_offsets) are tokenizers' own: each step keeps, beside
 * its text, the alignment of every byte (abuf: the code point of the
 * caller's text it came from), with tokenizers' rules, quirks included (a
 * charsmap drop at the start shifts the alignments after it, lag_state;
 * RobertaProcessing trims white space off a token's span); a step given
 * no alignments runs as it did without them.
 *
 * Precompiled, as tokenizers does it (spm_precompiled): the text is cut into
 * extended grapheme clusters; a cluster shorter than 6 bytes whose bytes
 * start with a key of the double-array trie is replaced whole by the value
 * of the first (shortest) such key; otherwise each of its characters is
 * looked up alone the same way and kept when none matches.
 */
#include "core/errors.h"
#include "format/json_in.h"
#include "tokenize/tokenizer_json.h"
#include "tokenize/utf8.h"
#include "tokenize/vocab.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define TJ_MAX_STEPS 32    /* normalizer / pre-tokenizer steps, flattened */
#define TJ_MAX_ADDED 4096  /* added tokens */
#define TJ_MAX_TEMPLATE 16 /* special ids around the text */
#define TJ_MAX_TEXT ((size_t)INT_MAX / 8)
/* The longest vocabulary piece or added token, in bytes, a file may hold
 * (real ones are a few dozen: sentencepiece's default max_piece_length is
 * 16 characters). Every place in a text costs at most this many steps of
 * the trie walk, so tokenizing is linear in the text; a longer piece is
 * refused at load, naming it. */
#define TJ_MAX_PIECE 1024

typedef int32_t cp_t;

/* ------------------------------------------------------------ stopping */

/* The caller's stop check (tokenizer_*_stoppable), asked after about every
 * TJ_POLL_BYTES bytes of work: of the text, and of each pass over it. */
#define TJ_POLL_BYTES 4096           /* tokenizer.h's TOKENIZER_POLL_BYTES */
#define TJ_CHUNK (4 * TJ_POLL_BYTES) /* a normalizer's run between checks */

typedef struct {
    int (*fn)(void *user); /* NULL: never stop */
    void *user;
    long budget; /* bytes before the next check */
    char *err;
} stopper;

static int poll_stop(stopper *st, size_t bytes)
{
    st->budget -= (long)bytes;
    if (st->budget > 0) return SM_OK;
    st->budget = st->fn ? TJ_POLL_BYTES : LONG_MAX;
    return st->fn && st->fn(st->user) ? sm_error(st->err, SM_ERR_INTERRUPTED, "interrupted")
                                      : SM_OK;
}

/* ------------------------------------------------------------ buffers */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_reserve(sbuf *b, size_t more)
{
    size_t need = b->n + more + 1, cap = b->cap ? b->cap : 64;
    char *np;
    if (need <= b->cap) return SM_OK;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return SM_ERR_NOMEM;
        cap *= 2;
    }
    np = realloc(b->p, cap);
    if (!np) return SM_ERR_NOMEM;
    b->p = np;
    b->cap = cap;
    return SM_OK;
}

static int sb_add(sbuf *b, const char *s, size_t n)
{
    if (sb_reserve(b, n)) return SM_ERR_NOMEM;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return SM_OK;
}

static int sb_cp(sbuf *b, cp_t c)
{
    if (sb_reserve(b, 4)) return SM_ERR_NOMEM;
    b->n += (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)b->p + b->n);
    b->p[b->n] = '\0';
    return SM_OK;
}

/* Decodes one code point of valid UTF-8 s[0..n). */
static size_t dec(const char *s, size_t n, cp_t *c)
{
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, c);
    if (k <= 0) {
        *c = 0xFFFD;
        return 1;
    }
    return (size_t)k;
}

/* Alignments (tj_encode_offsets only): beside a text buffer, for each of
 * its bytes the offset in the caller's text of the code point it came
 * from (its first byte), or -1 for none. Every step maps each code point
 * it writes to one code point it read, as tokenizers' NormalizedString
 * alignments do: a character a step expands (NFKC, lower-casing, a
 * charsmap value) gives all its parts its source, a composed character
 * takes its starter's, a Replace's content takes the last character the
 * match replaced, Metaspace's prepended replacement takes the first
 * character's, and what a step drops has no part. A step given NULL
 * alignments keeps none and costs what it did. */
typedef struct {
    int32_t *p;
    size_t n, cap;
} abuf;

/* Extends a to `upto` entries with v. */
static int ab_fill(abuf *a, size_t upto, int32_t v)
{
    if (upto > a->cap) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap < upto) {
            if (cap > SIZE_MAX / 8) return SM_ERR_NOMEM;
            cap *= 2;
        }
        int32_t *np = realloc(a->p, cap * sizeof *np);
        if (!np) return SM_ERR_NOMEM;
        a->p = np;
        a->cap = cap;
    }
    while (a->n < upto) a->p[a->n++] = v;
    return SM_OK;
}

static int ab_add(abuf *a, const int32_t *src, size_t n)
{
    size_t at = a->n;
    if (n == 0) return SM_OK;
    if (ab_fill(a, a->n + n, 0)) return SM_ERR_NOMEM;
    memcpy(a->p + at, src, n * sizeof *src);
    return SM_OK;
}

/* Pieces: spans of one byte buffer. */
typedef struct {
    size_t off, len;
    int first; /* starts at the start of the original text */
} span;

typedef struct {
    sbuf text;
    span *s;
    size_t n, cap;
    abuf al; /* the text's alignments, when kept */
} pieces;

/* Adds s[0..n) as a piece; al: its alignments, NULL when not kept. */
static int pc_add(pieces *p, const char *s, size_t n, int first, const int32_t *al)
{
    if (n == 0) return SM_OK; /* tokenizers drops empty splits */
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        span *ns = realloc(p->s, cap * sizeof *ns);
        if (!ns) return SM_ERR_NOMEM;
        p->s = ns;
        p->cap = cap;
    }
    p->s[p->n].off = p->text.n;
    p->s[p->n].len = n;
    p->s[p->n].first = first;
    if (sb_add(&p->text, s, n)) return SM_ERR_NOMEM;
    if (al && ab_add(&p->al, al, n)) return SM_ERR_NOMEM;
    p->n++;
    return SM_OK;
}

static void pc_free(pieces *p)
{
    free(p->text.p);
    free(p->s);
    free(p->al.p);
    memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------ character classes */

/* Rust char::is_whitespace (White_Space). */
static int is_ws(cp_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static int is_cjk(cp_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static int is_punct(cp_t c)
{
    if (c < 0x80)
        return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
               (c >= 123 && c <= 126);
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return 1;
    default: return 0;
    }
}

/* BertNormalizer's is_control: Cc, Cf, Cn, Co, Cs except \t \n \r. */
static int is_other(cp_t c)
{
    if (c == '\t' || c == '\n' || c == '\r') return 0;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CS: return 1;
    default: return 0;
    }
}

/* ------------------------------------------------------------ the pipeline */

enum { N_PRECOMPILED = 1, N_REPLACE, N_STRIP, N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_BERT };
enum { P_METASPACE = 1, P_WHITESPACE, P_BERT };
enum { M_UNIGRAM = 1, M_WORDPIECE };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

typedef struct {
    int kind;
    /* Replace */
    char *pat, *content; /* pat: literal; or one char repeated */
    cp_t rep_char;       /* Regex "c+" / "c{n,}": the char, else 0 */
    int rep_min;
    /* Strip */
    int left, right;
    /* BertNormalizer */
    int clean, chinese, strip_accents, lowercase;
} norm_step;

typedef struct {
    int kind;
    char rep[8]; /* Metaspace replacement, UTF-8 */
    cp_t rep_cp;
    int prepend, split;
} pre_step;

typedef struct {
    char *content;
    size_t len;
    int id, lstrip, rstrip;
} added_tok;

struct tj_pipeline {
    size_t chunk;               /* normalizer pieces, bytes (TJ_CHUNK; 0: whole) */
    int split_space, split_cjk; /* where a segment may be cut (set_splits) */
    norm_step norm[TJ_MAX_STEPS];
    int n_norm;
    pre_step pre[TJ_MAX_STEPS];
    int n_pre;
    int model;
    int unk_id; /* -1 when none */
    int byte_fallback;
    double *scores; /* Unigram: score per id */
    double min_score;
    char prefix[64]; /* WordPiece continuing_subword_prefix */
    size_t prefix_len;
    int max_chars;     /* WordPiece max_input_chars_per_word */
    int byte_ids[256]; /* Unigram byte_fallback: <0xXX> ids or -1 */
    added_tok *added;
    int n_added;
    uint32_t added_first[8];               /* bit set of the added tokens' first bytes */
    int before[TJ_MAX_TEMPLATE], n_before; /* post-processor ids */
    int trim_offsets, trim_prefix;         /* RobertaProcessing trim_offsets, add_prefix_space */
    int after[TJ_MAX_TEMPLATE], n_after;
    /* Precompiled */
    uint32_t *trie;
    size_t trie_n;
    char *pool;
    size_t pool_n;
};

static void step_free(norm_step *s)
{
    free(s->pat);
    free(s->content);
}

void tj_set_chunk(tj_pipeline *tj, size_t bytes)
{
    tj->chunk = bytes;
}

void tj_free(tj_pipeline *tj)
{
    if (!tj) return;
    for (int i = 0; i < tj->n_norm; i++) step_free(&tj->norm[i]);
    for (int i = 0; i < tj->n_added; i++) free(tj->added[i].content);
    free(tj->added);
    free(tj->scores);
    free(tj->trie);
    free(tj->pool);
    free(tj);
}

/* A copy of n bytes (a NUL after them), or NULL when src is NULL or out of
 * memory (*nomem then 1). */
static void *copy_bytes(const void *src, size_t n, int *nomem)
{
    if (!src) return NULL;
    char *p = malloc(n + 1);
    if (!p) {
        *nomem = 1;
        return NULL;
    }
    memcpy(p, src, n);
    p[n] = 0;
    return p;
}

int tj_clone(const tj_pipeline *src, int n_pieces, tj_pipeline **out, char *err)
{
    int nomem = 0;
    *out = NULL;
    tj_pipeline *tj = malloc(sizeof *tj);
    if (!tj)
        return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory copying the pipeline");
    *tj = *src; /* the plain values; every pointer is replaced below */
    tj->added = NULL;
    tj->n_added = 0;
    tj->scores = NULL;
    tj->trie = NULL;
    tj->pool = NULL;
    for (int i = 0; i < src->n_norm; i++) tj->norm[i].pat = tj->norm[i].content = NULL;
    tj->n_norm = 0;
    for (int i = 0; i < src->n_norm; i++, tj->n_norm++) {
        const norm_step *s = &src->norm[i];
        tj->norm[i].pat = copy_bytes(s->pat, s->pat ? strlen(s->pat) : 0, &nomem);
        tj->norm[i].content = copy_bytes(s->content, s->content ? strlen(s->content) : 0, &nomem);
    }
    if (src->added) {
        tj->added = calloc(src->n_added ? (size_t)src->n_added : 1, sizeof *tj->added);
        nomem |= !tj->added;
        for (int i = 0; tj->added && i < src->n_added; i++, tj->n_added++) {
            tj->added[i] = src->added[i];
            const char *c = src->added[i].content;
            tj->added[i].content = copy_bytes(c, c ? strlen(c) : 0, &nomem);
        }
    }
    if (src->scores)
        tj->scores = copy_bytes(src->scores, (size_t)n_pieces * sizeof *src->scores, &nomem);
    if (src->trie) tj->trie = copy_bytes(src->trie, src->trie_n * sizeof *src->trie, &nomem);
    if (src->pool) tj->pool = copy_bytes(src->pool, src->pool_n, &nomem);
    if (nomem) {
        tj_free(tj);
        return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory copying the pipeline");
    }
    *out = tj;
    return SM_OK;
}

/* ------------------------------------------------------------ normalizers */

/* The value of the shortest trie key that is a prefix of s[0..n), or -1. */
static long trie_first(const tj_pipeline *tj, const unsigned char *s, size_t n)
{
    size_t pos = 0;
    uint32_t unit;
    if (tj->trie_n == 0) return -1;
    unit = tj->trie[0];
    pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
    for (size_t i = 0; i < n; i++) {
        if (s[i] == 0) break;
        pos ^= s[i];
        if (pos >= tj->trie_n) return -1;
        unit = tj->trie[pos];
        if ((unit & ((1u << 31) | 0xFF)) != s[i]) return -1;
        pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
        if ((unit >> 8) & 1) {
            if (pos >= tj->trie_n) return -1;
            return (long)(tj->trie[pos] & ((1u << 31) - 1));
        }
    }
    return -1;
}

/* Appends the pool string at value v; SM_ERR_FORMAT when v is outside. */
static int pool_put(const tj_pipeline *tj, long v, sbuf *out, char *err)
{
    size_t e;
    if (v < 0 || (size_t)v >= tj->pool_n)
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: Precompiled "
                        "charsmap value %ld is outside its %zu-byte string pool",
                        v, tj->pool_n);
    for (e = (size_t)v; e < tj->pool_n && tj->pool[e]; e++)
        ;
    if (!json_in_utf8_valid(tj->pool + v, e - (size_t)v) && e > (size_t)v)
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: Precompiled "
                        "charsmap value %ld is not valid UTF-8",
                        v);
    return sb_add(out, tj->pool + v, e - (size_t)v) ? SM_ERR_NOMEM : SM_OK;
}

/* Alignments of what a replacement appended (out->p[from..out->n)) for
 * the characters s[0..m) aligned ai: the j-th new character takes the
 * j-th old one's, the ones past the last old character the last one's
 * (spm_precompiled's replace() changes). */
static int align_replacement(const sbuf *out, size_t from, const char *s, size_t m,
                             const int32_t *ai, abuf *ao)
{
    size_t o = 0;
    for (size_t q = from; q < out->n;) {
        cp_t c;
        size_t k = dec(out->p + q, out->n - q, &c);
        if (ab_fill(ao, q + k, ai[o])) return SM_ERR_NOMEM;
        q += k;
        size_t ok = dec(s + o, m - o, &c);
        if (o + ok < m) o += ok;
    }
    return SM_OK;
}

/* tokenizers' Precompiled drops what the charsmap maps to "" by adding
 * it to the change of the character before; with none before (at the
 * start of the text) it is lost, so every character after takes the
 * alignment of the one `lag` characters before it in the text, lag being
 * what was dropped there. lagged() gives the alignment that the character
 * at byte `at` of the step's input (base, aligned base_al) gets: `cp`
 * walks to it, `lp` the same number of characters from the start.
 * Dropped after a character the charsmap added (a change of +1, aligned
 * with the one before), the change becomes 0 or less: that character now
 * takes the alignment of the first one dropped. ins: where in the output
 * the last character written starts when it was such an addition, else
 * SIZE_MAX. */
typedef struct {
    const char *base;
    const int32_t *base_al;
    size_t n, lp, cp, ins;
} lag_state;

static int32_t lagged(lag_state *g, size_t at)
{
    while (g->cp < at) {
        cp_t c;
        g->cp += dec(g->base + g->cp, g->n - g->cp, &c);
        g->lp += dec(g->base + g->lp, g->n - g->lp, &c);
    }
    return g->base_al[g->lp];
}

/* Where the last character of out->p[from..out->n) starts when the
 * replacement of the characters s[0..m) added it (it is past the m-th
 * new one), else SIZE_MAX. */
static size_t added_last(const sbuf *out, size_t from, const char *s, size_t m)
{
    size_t n_old = 0, n_new = 0, last = SIZE_MAX;
    cp_t c;
    for (size_t q = 0; q < m; q += dec(s + q, m - q, &c)) n_old++;
    for (size_t q = from; q < out->n; q += dec(out->p + q, out->n - q, &c)) {
        n_new++;
        last = q;
    }
    return n_new > n_old ? last : SIZE_MAX;
}

/* The character at byte `at` of the input was dropped, not at the start. */
static void dropped(lag_state *g, size_t at, abuf *ao)
{
    if (g->ins == SIZE_MAX) return;
    int32_t v = lagged(g, at);
    for (size_t q = g->ins; q < ao->n; q++) ao->p[q] = v;
    g->ins = SIZE_MAX;
}

static int norm_precompiled(const tj_pipeline *tj, const char *s, size_t n, sbuf *out,
                            const int32_t *ai, abuf *ao, lag_state *g, char *err)
{
    size_t i = 0;
    int32_t lag_al[32]; /* a cluster's characters' alignments, lagged */
    while (i < n) {
        /* one extended grapheme cluster s[i..j) */
        size_t j;
        cp_t c1, c2;
        utf8proc_int32_t state = 0;
        j = i + dec(s + i, n - i, &c1);
        while (j < n) {
            size_t k = dec(s + j, n - j, &c2);
            if (utf8proc_grapheme_break_stateful(c1, c2, &state)) break;
            c1 = c2;
            j += k;
        }
        if (j - i < 6) {
            long v = trie_first(tj, (const unsigned char *)s + i, j - i);
            if (v >= 0) {
                size_t from = out->n, at = (size_t)(s - g->base) + i;
                int rc = pool_put(tj, v, out, err);
                if (!rc && ai && out->n == 0 && from == 0) {
                    g->cp = at + (j - i); /* dropped at the start: the lag grows */
                } else if (!rc && ai && out->n == from) {
                    dropped(g, at, ao);
                } else if (!rc && ai) {
                    for (size_t q = i; q < j; q += dec(s + q, j - q, &c2))
                        lag_al[q - i] = lagged(g, at + (q - i));
                    rc = align_replacement(out, from, s + i, j - i, lag_al, ao);
                    g->ins = added_last(out, from, s + i, j - i);
                }
                if (rc) return rc;
                i = j;
                continue;
            }
        }
        while (i < j) {
            cp_t c;
            size_t k = dec(s + i, j - i, &c), from = out->n;
            long v = trie_first(tj, (const unsigned char *)s + i, k);
            int rc = v >= 0 ? pool_put(tj, v, out, err)
                            : (sb_add(out, s + i, k) ? SM_ERR_NOMEM : SM_OK);
            if (!rc && ai) {
                size_t at = (size_t)(s - g->base) + i;
                if (out->n == 0 && from == 0) {
                    g->cp = at + k; /* dropped at the start: the lag grows */
                } else if (out->n == from) {
                    dropped(g, at, ao);
                } else {
                    rc = ab_fill(ao, out->n, lagged(g, at));
                    g->ins = v >= 0 ? added_last(out, from, s + i, k) : SIZE_MAX;
                }
            }
            if (rc) return rc;
            i += k;
        }
    }
    return SM_OK;
}

/* The start of the last code point of s[0..e) (e > 0). */
static size_t last_cp(const char *s, size_t e)
{
    size_t q = e - 1;
    while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
    return q;
}

/* Copies the code point at s + *i (s of n bytes) to out as it is, with its
 * sources (ai, into ao, when given), and steps *i past it. */
static int copy_char(const char *s, size_t n, size_t *i, sbuf *out, const int32_t *ai, abuf *ao)
{
    cp_t c;
    size_t k = dec(s + *i, n - *i, &c);
    if (sb_add(out, s + *i, k) || (ai && ab_add(ao, ai + *i, k))) return SM_ERR_NOMEM;
    *i += k;
    return SM_OK;
}

static int norm_replace(const norm_step *st, const char *s, size_t n, sbuf *out, const int32_t *ai,
                        abuf *ao)
{
    size_t i = 0, cl = strlen(st->content);
    if (st->rep_char) {
        char rc[4];
        size_t rl = (size_t)utf8proc_encode_char(st->rep_char, (utf8proc_uint8_t *)rc);
        while (i < n) {
            size_t j = i;
            int cnt = 0;
            while (j + rl <= n && memcmp(s + j, rc, rl) == 0) {
                j += rl;
                cnt++;
            }
            if (cnt >= st->rep_min && cnt > 0) {
                if (sb_add(out, st->content, cl) || (ai && ab_fill(ao, out->n, ai[j - rl])))
                    return SM_ERR_NOMEM;
                i = j;
            } else if (cnt > 0) {
                if (sb_add(out, s + i, j - i) || (ai && ab_add(ao, ai + i, j - i)))
                    return SM_ERR_NOMEM;
                i = j;
            } else if (copy_char(s, n, &i, out, ai, ao)) {
                return SM_ERR_NOMEM;
            }
        }
        return SM_OK;
    }
    size_t pl = strlen(st->pat);
    while (i < n) {
        if (i + pl <= n && memcmp(s + i, st->pat, pl) == 0) {
            if (sb_add(out, st->content, cl) ||
                (ai && ab_fill(ao, out->n, ai[i + last_cp(s + i, pl)])))
                return SM_ERR_NOMEM;
            i += pl;
        } else if (copy_char(s, n, &i, out, ai, ao)) {
            return SM_ERR_NOMEM;
        }
    }
    return SM_OK;
}

/* The sources of a composed text: out[0..no) is the composition of
 * d[0..nd) (sources src[0..nd)); each composed code point takes its
 * starter's source and the marks it absorbed are crossed off d. Rewrites
 * src[0..no) in place. (tokenizer.c aligns its NFC the same way.) */
static void align_composed(const cp_t *out, size_t no, cp_t *d, size_t nd, int32_t *src)
{
    size_t j = 0;
    for (size_t k = 0; k < no && j < nd; k++, j++) {
        while (j < nd - 1 && d[j] < 0) j++;
        src[k] = src[j];
        if (out[k] == d[j]) continue;
        cp_t t[8];
        int bc = UTF8PROC_BOUNDCLASS_START;
        utf8proc_ssize_t m = utf8proc_decompose_char(out[k], t, 8, UTF8PROC_DECOMPOSE, &bc);
        size_t q = j + 1;
        for (utf8proc_ssize_t x = 1; x < m && x <= 8; x++) {
            while (q < nd && d[q] != t[x]) q++;
            if (q < nd) d[q++] = -1;
        }
    }
}

/* norm_utf8proc keeping alignments: what utf8proc_map does (decompose
 * each code point, canonical order, compose), on code points with their
 * sources. */
static int norm_utf8proc_aligned(int flags, const char *s, size_t n, sbuf *out, const int32_t *ai,
                                 abuf *ao, char *err)
{
    cp_t *cp = NULL, *d = NULL;
    int32_t *src = NULL;
    size_t nc = 0, cap = 0;
    int bc = UTF8PROC_BOUNDCLASS_START, rc = SM_OK;
    for (size_t i = 0; i < n && !rc;) {
        cp_t c;
        size_t k = dec(s + i, n - i, &c);
        if (nc + 32 > cap) {
            size_t nl = cap ? cap * 2 : 64;
            cp_t *np = realloc(cp, nl * sizeof *np);
            int32_t *ns = np ? realloc(src, nl * sizeof *ns) : NULL;
            if (np) cp = np;
            if (ns) src = ns;
            if (!np || !ns) {
                rc = SM_ERR_NOMEM;
                break;
            }
            cap = nl;
        }
        utf8proc_ssize_t m = utf8proc_decompose_char(c, cp + nc, 32, (utf8proc_option_t)flags, &bc);
        if (m < 0 || m > 32) {
            rc = sm_error(err, SM_ERR_INVALID, "tokenizer: normalisation failed");
            break;
        }
        for (utf8proc_ssize_t j = 0; j < m; j++) src[nc + (size_t)j] = ai[i];
        nc += (size_t)m;
        i += k;
    }
    for (size_t i = 0; !rc && i + 1 < nc;) { /* canonical order, sources moving along */
        int c1 = utf8proc_get_property(cp[i])->combining_class;
        int c2 = utf8proc_get_property(cp[i + 1])->combining_class;
        if (c1 > c2 && c2 > 0) {
            cp_t t = cp[i];
            cp[i] = cp[i + 1];
            cp[i + 1] = t;
            int32_t u = src[i];
            src[i] = src[i + 1];
            src[i + 1] = u;
            i = i ? i - 1 : i + 1;
        } else {
            i++;
        }
    }
    if (!rc && nc && (flags & UTF8PROC_COMPOSE)) {
        if (!(d = malloc(nc * sizeof *d))) {
            rc = SM_ERR_NOMEM;
        } else {
            memcpy(d, cp, nc * sizeof *d);
            utf8proc_ssize_t m = utf8proc_normalize_utf32(cp, (utf8proc_ssize_t)nc,
                                                          (utf8proc_option_t)(flags &
                                                                              ~UTF8PROC_COMPAT));
            if (m < 0) {
                rc = sm_error(err, SM_ERR_INVALID, "tokenizer: normalisation failed");
            } else {
                align_composed(cp, (size_t)m, d, nc, src);
                nc = (size_t)m;
            }
        }
    }
    for (size_t i = 0; i < nc && !rc; i++)
        if (sb_cp(out, cp[i]) || ab_fill(ao, out->n, src[i])) rc = SM_ERR_NOMEM;
    free(cp);
    free(src);
    free(d);
    return rc == SM_ERR_NOMEM ? sm_error(err, SM_ERR_NOMEM, "tokenizer: out of memory") : rc;
}

static int norm_utf8proc(int kind, const char *s, size_t n, sbuf *out, const int32_t *ai, abuf *ao,
                         char *err)
{
    utf8proc_uint8_t *r = NULL;
    int flags = UTF8PROC_STABLE;
    utf8proc_ssize_t m;
    if (kind == N_NFC || kind == N_NFKC) flags |= UTF8PROC_COMPOSE;
    else flags |= UTF8PROC_DECOMPOSE;
    if (kind == N_NFKC || kind == N_NFKD) flags |= UTF8PROC_COMPAT;
    if (n == 0) return SM_OK;
    if (ai) return norm_utf8proc_aligned(flags, s, n, out, ai, ao, err);
    m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &r,
                     (utf8proc_option_t)flags);
    if (m < 0)
        return m == UTF8PROC_ERROR_NOMEM
                   ? sm_error(err, SM_ERR_NOMEM, "tokenizer: out of memory")
                   : sm_error(err, SM_ERR_INVALID, "tokenizer: normalisation failed");
    int rc = sb_add(out, (const char *)r, (size_t)m);
    free(r);
    return rc ? SM_ERR_NOMEM : SM_OK;
}

static int put_lower(sbuf *out, cp_t c)
{
    if (c == 0x130) return sb_cp(out, 'i') || sb_cp(out, 0x307);
    return sb_cp(out, utf8proc_tolower(c));
}

static int norm_lower(const char *s, size_t n, sbuf *out, const int32_t *ai, abuf *ao)
{
    for (size_t i = 0; i < n;) {
        cp_t c;
        size_t at = i;
        i += dec(s + i, n - i, &c);
        if (put_lower(out, c) || (ai && ab_fill(ao, out->n, ai[at]))) return SM_ERR_NOMEM;
    }
    return SM_OK;
}

static int norm_bert(const norm_step *st, const char *s, size_t n, sbuf *out, const int32_t *ai,
                     abuf *ao, char *err)
{
    sbuf a = {0}, b = {0};
    abuf aa = {0}, ba = {0};
    int rc = SM_OK;
    for (size_t i = 0; i < n && !rc;) {
        cp_t c;
        size_t at = i;
        i += dec(s + i, n - i, &c);
        if (st->clean && (c == 0 || c == 0xFFFD || is_other(c))) continue;
        if (st->clean && is_ws(c)) c = ' ';
        if (st->chinese && is_cjk(c)) rc = sb_cp(&a, ' ') || sb_cp(&a, c) || sb_cp(&a, ' ');
        else rc = sb_cp(&a, c);
        if (!rc && ai) rc = ab_fill(&aa, a.n, ai[at]);
    }
    if (rc) goto end;
    if (st->strip_accents && a.n) {
        rc = norm_utf8proc(N_NFD, a.p, a.n, &b, ai ? aa.p : NULL, &ba, err);
        if (rc) goto end;
        a.n = 0;
        aa.n = 0;
        for (size_t i = 0; i < b.n && !rc;) {
            cp_t c;
            size_t at = i;
            i += dec(b.p + i, b.n - i, &c);
            if (utf8proc_category(c) != UTF8PROC_CATEGORY_MN) {
                rc = sb_cp(&a, c);
                if (!rc && ai) rc = ab_fill(&aa, a.n, ba.p[at]);
            }
        }
        if (rc) goto end;
    }
    if (st->lowercase) rc = norm_lower(a.p ? a.p : "", a.n, out, ai ? aa.p : NULL, ao);
    else rc = sb_add(out, a.p ? a.p : "", a.n) || (ai && ab_add(ao, aa.p, a.n));
end:
    free(a.p);
    free(b.p);
    free(aa.p);
    free(ba.p);
    return rc == SM_ERR_NOMEM ? sm_error(err, SM_ERR_NOMEM, "tokenizer: out of memory") : rc;
}

static int norm_strip(const norm_step *st, const char *s, size_t n, sbuf *out, const int32_t *ai,
                      abuf *ao)
{
    size_t a = 0, b = n;
    if (st->left)
        while (a < b) {
            cp_t c;
            size_t k = dec(s + a, b - a, &c);
            if (!is_ws(c)) break;
            a += k;
        }
    if (st->right)
        while (b > a) {
            size_t k = 1;
            cp_t c;
            while (k < b - a && ((unsigned char)s[b - k] & 0xC0) == 0x80) k++;
            dec(s + b - k, k, &c);
            if (!is_ws(c)) break;
            b -= k;
        }
    if (ai && ab_add(ao, ai + a, b - a)) return SM_ERR_NOMEM;
    return sb_add(out, s + a, b - a);
}

/* Whether a step moves the first character off the start of the original
 * text, as the alignments of tokenizers' NormalizedString do: Strip removing
 * leading characters, BertNormalizer's clean step dropping them, and a
 * Replace match at the start that is longer than one character or deletes
 * (its first new character takes the alignment of the last one it
 * replaces). Metaspace's prepend_scheme "first" asks for this. */
static int keeps_lead(const norm_step *st, const char *s, size_t n)
{
    cp_t c;
    size_t k;
    if (n == 0) return 1;
    k = dec(s, n, &c);
    switch (st->kind) {
    case N_STRIP: return !(st->left && is_ws(c));
    case N_BERT: return !(st->clean && (c == 0 || c == 0xFFFD || is_other(c)));
    case N_REPLACE:
        if (st->rep_char) {
            size_t rl = k, cnt = 0;
            if (c != st->rep_char) return 1;
            for (size_t i = 0; i + rl <= n && memcmp(s + i, s, rl) == 0; i += rl) cnt++;
            if ((int)cnt < st->rep_min) return 1;
            return cnt == 1 && st->content[0];
        } else {
            size_t pl = strlen(st->pat);
            if (pl > n || memcmp(s, st->pat, pl)) return 1;
            return pl == k && st->content[0];
        }
    default: return 1;
    }
}

/* 1 when the NUL-terminated pat holds the bytes b[0..l). */
static int contains(const char *pat, const char *b, size_t l)
{
    for (const char *p = pat; *p; p++)
        if (strncmp(p, b, l) == 0) return 1;
    return 0;
}

/* 1 when step st gives the same text for s cut between the code points
 * c1 and c2 as for s whole: both are ASCII letters or digits or common
 * ideographs, starters that compose with nothing before them, that
 * nothing decomposes across and between which a grapheme cluster always
 * ends (Precompiled works cluster by cluster); for Replace, neither is in
 * the pattern, so no match spans the cut. Strip is never cut. */
static int cut_ok(const norm_step *st, cp_t c1, cp_t c2)
{
    cp_t c[2] = {c1, c2};
    if (st->kind == N_STRIP) return 0;
    for (int i = 0; i < 2; i++) {
        cp_t x = c[i];
        int simple = (x >= '0' && x <= '9') || ((x | 0x20) >= 'a' && (x | 0x20) <= 'z') ||
                     (x >= 0x4E00 && x <= 0x9FFF) || (x >= 0x3400 && x <= 0x4DBF);
        if (!simple) return 0;
        if (st->kind == N_REPLACE) {
            char b[4];
            size_t l = (size_t)utf8proc_encode_char(x, (utf8proc_uint8_t *)b);
            if (st->rep_char ? x == st->rep_char : contains(st->pat, b, l)) return 0;
        }
    }
    return 1;
}

/* Where the piece of s[at..n) that step st normalizes next ends: n, or
 * the first place at least `chunk` bytes on where cut_ok holds (n when
 * none does). */
static size_t chunk_end(const norm_step *st, size_t chunk, const char *s, size_t n, size_t at)
{
    size_t p, q;
    cp_t c1, c2;
    if (chunk == 0 || n - at <= chunk || st->kind == N_STRIP) return n;
    for (p = at + chunk; p < n && ((unsigned char)s[p] & 0xC0) == 0x80; p++)
        ; /* a character boundary */
    if (p >= n) return n;
    q = p; /* the character before p starts at q */
    do q--;
    while (q > at && ((unsigned char)s[q] & 0xC0) == 0x80);
    dec(s + q, p - q, &c1);
    while (p < n) {
        size_t k = dec(s + p, n - p, &c2);
        if (cut_ok(st, c1, c2)) return p;
        c1 = c2;
        p += k;
    }
    return n;
}

/* The normalizer chain over s[0..n) into *out (replaced); *lead is cleared
 * when a step moves the first character off the original start. Each step
 * runs over pieces of about TJ_CHUNK bytes cut where it gives the same
 * text (chunk_end), the stop check asked between them. */
static int normalize(const tj_pipeline *tj, const char *s, size_t n, const int32_t *al, sbuf *out,
                     abuf *out_al, int *lead, stopper *stop, char *err)
{
    sbuf cur = {0}, nxt = {0};
    abuf cur_al = {0}, nxt_al = {0};
    int rc = sb_add(&cur, s, n) || (al && ab_add(&cur_al, al, n)) ? SM_ERR_NOMEM : SM_OK;
    for (int k = 0; k < tj->n_norm && !rc; k++) {
        const norm_step *st = &tj->norm[k];
        lag_state g = {cur.p, cur_al.p, cur.n, 0, 0, SIZE_MAX};
        nxt.n = 0;
        nxt_al.n = 0;
        if (*lead && !keeps_lead(st, cur.p, cur.n)) *lead = 0;
        for (size_t at = 0, end; at < cur.n && !rc; at = end) {
            const char *p = cur.p + at;
            const int32_t *a = al ? cur_al.p + at : NULL;
            size_t m = (end = chunk_end(st, tj->chunk, cur.p, cur.n, at)) - at;
            switch (st->kind) {
            case N_PRECOMPILED: rc = norm_precompiled(tj, p, m, &nxt, a, &nxt_al, &g, err); break;
            case N_REPLACE: rc = norm_replace(st, p, m, &nxt, a, &nxt_al); break;
            case N_STRIP: rc = norm_strip(st, p, m, &nxt, a, &nxt_al); break;
            case N_LOWER: rc = norm_lower(p, m, &nxt, a, &nxt_al); break;
            case N_BERT: rc = norm_bert(st, p, m, &nxt, a, &nxt_al, err); break;
            default: rc = norm_utf8proc(st->kind, p, m, &nxt, a, &nxt_al, err); break;
            }
            if (!rc) rc = poll_stop(stop, m);
        }
        if (!rc && sb_reserve(&nxt, 0)) rc = SM_ERR_NOMEM;
        sbuf t = cur;
        cur = nxt;
        nxt = t;
        abuf ta = cur_al;
        cur_al = nxt_al;
        nxt_al = ta;
    }
    free(nxt.p);
    free(nxt_al.p);
    if (rc) {
        free(cur.p);
        free(cur_al.p);
        return rc == SM_ERR_NOMEM ? sm_error(err, SM_ERR_NOMEM, "tokenizer: out of memory") : rc;
    }
    *out = cur;
    *out_al = cur_al;
    return SM_OK;
}

/* ---------------------------------------------------------- pre-tokenizers */

#define AL(al, i) ((al) ? (al) + (i) : NULL)

static int pre_whitespace(const char *s, size_t n, int first, const int32_t *al, pieces *out)
{
    size_t i = 0, start = 0;
    while (i < n) {
        cp_t c;
        size_t k = dec(s + i, n - i, &c);
        if (is_ws(c)) {
            if (pc_add(out, s + start, i - start, first && start == 0, AL(al, start)))
                return SM_ERR_NOMEM;
            start = i + k;
        }
        i += k;
    }
    return pc_add(out, s + start, n - start, first && start == 0, AL(al, start));
}

static int pre_bert(const char *s, size_t n, int first, const int32_t *al, pieces *out)
{
    size_t i = 0, start = 0;
    while (i < n) {
        cp_t c;
        size_t k = dec(s + i, n - i, &c);
        if (is_ws(c) || is_punct(c)) {
            if (pc_add(out, s + start, i - start, first && start == 0, AL(al, start)))
                return SM_ERR_NOMEM;
            if (!is_ws(c) && pc_add(out, s + i, k, first && i == 0, AL(al, i))) return SM_ERR_NOMEM;
            start = i + k;
        }
        i += k;
    }
    return pc_add(out, s + start, n - start, first && start == 0, AL(al, start));
}

/* Metaspace: a space becomes the replacement (aligned with the space), the
 * one prepended is aligned with the piece's first character. */
static int pre_metaspace(const pre_step *st, const char *s, size_t n, int first, const int32_t *al,
                         pieces *out)
{
    sbuf t = {0};
    abuf ta = {0};
    size_t rl = strlen(st->rep), i;
    int rc = SM_OK;
    for (i = 0; i < n && !rc; i++) {
        rc = s[i] == ' ' ? sb_add(&t, st->rep, rl) : sb_add(&t, s + i, 1);
        if (!rc && al) rc = ab_fill(&ta, t.n, al[i]);
    }
    if (!rc && t.n && !(t.n >= rl && memcmp(t.p, st->rep, rl) == 0) &&
        (st->prepend == PREPEND_ALWAYS || (st->prepend == PREPEND_FIRST && first))) {
        sbuf u = {0};
        rc = sb_add(&u, st->rep, rl) || sb_add(&u, t.p, t.n);
        free(t.p);
        t = u;
        if (!rc && al) {
            abuf ua = {0};
            rc = ab_fill(&ua, rl, ta.p[0]) || ab_add(&ua, ta.p, ta.n);
            free(ta.p);
            ta = ua;
        }
    }
    const int32_t *tal = al ? ta.p : NULL;
    if (!rc && t.n) {
        if (!st->split) {
            rc = pc_add(out, t.p, t.n, first, tal);
        } else { /* MergedWithNext: each replacement starts a piece */
            size_t start = 0;
            for (i = 0; i < t.n && !rc; i++) {
                if (i > start && i + rl <= t.n && memcmp(t.p + i, st->rep, rl) == 0) {
                    rc = pc_add(out, t.p + start, i - start, first && start == 0, AL(tal, start));
                    start = i;
                }
            }
            if (!rc)
                rc = pc_add(out, t.p + start, t.n - start, first && start == 0, AL(tal, start));
        }
    }
    free(t.p);
    free(ta.p);
    return rc;
}

/* The pre-tokenizer chain over one normalized segment, into *out. */
static int pre_tokenize(const tj_pipeline *tj, const char *s, size_t n, const int32_t *al,
                        int first, stopper *stop, pieces *out)
{
    pieces cur = {0}, nxt = {0};
    int rc = pc_add(&cur, s, n, first, al);
    for (int k = 0; k < tj->n_pre && !rc; k++) {
        const pre_step *st = &tj->pre[k];
        nxt.n = 0;
        nxt.text.n = 0;
        nxt.al.n = 0;
        for (size_t i = 0; i < cur.n && !rc; i++) {
            const char *p = cur.text.p + cur.s[i].off;
            const int32_t *a = al ? cur.al.p + cur.s[i].off : NULL;
            size_t l = cur.s[i].len;
            int f = cur.s[i].first;
            rc = st->kind == P_WHITESPACE ? pre_whitespace(p, l, f, a, &nxt)
                 : st->kind == P_BERT     ? pre_bert(p, l, f, a, &nxt)
                                          : pre_metaspace(st, p, l, f, a, &nxt);
            if (!rc) rc = poll_stop(stop, l);
        }
        pieces t = cur;
        cur = nxt;
        nxt = t;
    }
    pc_free(&nxt);
    if (rc) {
        pc_free(&cur);
        return rc;
    }
    *out = cur;
    return SM_OK;
}

/* ------------------------------------------------------------------ models */

typedef struct {
    int *ids;
    int cap, n, limit;
    stopper *stop;
    /* Offsets, when starts is not NULL: for each id written, the source
     * offsets (abuf) of the first and the last byte of its span in the
     * piece the model is on, whose alignments are al. */
    int *starts, *ends;
    const int32_t *al;
    const int32_t *text_al; /* the repaired text's alignments */
    /* RobertaProcessing's trim_offsets: the white space characters that
     * each token's string starts and ends with (NULL when not wanted). */
    int *lead, *trail;
    const vocab *voc;
} sink;

/* The offsets of the id at k->n (put_v). */
static __attribute__((noinline)) void put_offsets(sink *k, int id, size_t a, size_t e,
                                                  const char *v, size_t vl)
{
    k->starts[k->n] = k->al[a];
    k->ends[k->n] = k->al[e - 1];
    if (k->lead) {
        int l = 0, t = 0, all = 1;
        if (!v) {
            v = vocab_token(k->voc, id);
            vl = v ? strlen(v) : 0;
        }
        for (size_t i = 0; i < vl;) {
            cp_t c;
            i += dec(v + i, vl - i, &c);
            if (!is_ws(c)) {
                all = 0;
                t = 0;
            } else {
                l += all;
                t++;
            }
        }
        k->lead[k->n] = l;
        k->trail[k->n] = t;
    }
}

/* One id, from bytes a..e (exclusive) of the current piece; v[0..vl): the
 * token's string as tokenizers has it (the piece for Unigram, the
 * vocabulary's for WordPiece, NULL: the vocabulary's). */
static inline void put_v(sink *k, int id, size_t a, size_t e, const char *v, size_t vl)
{
    if (k->n < k->cap) {
        k->ids[k->n] = id;
        if (k->starts) put_offsets(k, id, a, e, v, vl);
    }
    k->n++;
}

static inline void put(sink *k, int id, size_t a, size_t e)
{
    put_v(k, id, a, e, NULL, 0);
}

static int full(const sink *k)
{
    return k->n > k->limit;
}

/* Greedy longest match over one word: from each start one walk down the
 * vocabulary's trie (after the continuing prefix when not at the word's
 * start) finds the longest token there, so a token costs at most the
 * longest piece's length (TJ_MAX_PIECE) in steps, however long the word. */
static int wordpiece(const tj_pipeline *tj, const vocab *voc, const char *s, size_t n, sink *out)
{
    size_t nch = 0, start = 0;
    int first_n = out->n;
    uint32_t cont = 0; /* the node of the continuing prefix, 0 when none */
    int rc;
    for (size_t i = 0; i < n; nch++) {
        cp_t c;
        size_t k = dec(s + i, n - i, &c);
        i += k;
        if ((out->stop->budget -= (long)k) <= 0 && (rc = poll_stop(out->stop, 0))) return rc;
    }
    if (nch > (size_t)tj->max_chars) {
        put(out, tj->unk_id, 0, n);
        return SM_OK;
    }
    for (size_t i = 0; i < tj->prefix_len; i++)
        if (!(cont = vocab_trie_next(voc, i ? cont : 0, (unsigned char)tj->prefix[i]))) break;
    while (start < n) {
        int prefixed = start && tj->prefix_len;
        uint32_t node = prefixed ? cont : 0;
        size_t end = n;
        /* The whole rest, when it is a token, is the longest match: one
         * hash probe for the usual word (an ideograph, a short word). */
        int id = n - start <= TJ_MAX_PIECE
                     ? vocab_lookup_prefixed(voc, tj->prefix, prefixed ? tj->prefix_len : 0,
                                             s + start, n - start)
                     : -1;
        /* A token ends on a character boundary (its bytes are valid
         * UTF-8, and so are s's); the check keeps that exact anyway. When
         * no token has the prefix (cont 0) nothing continues the word. */
        int walk = id < 0 && !(prefixed && !cont);
        for (size_t e = start; e < n && walk;) {
            node = vocab_trie_next(voc, node, (unsigned char)s[e++]);
            if (!node) break;
            if (e < n && ((unsigned char)s[e] & 0xC0) == 0x80) continue;
            int k = vocab_trie_id(voc, node);
            if (k >= 0) {
                id = k;
                end = e;
            }
        }
        if (id < 0) {
            out->n = first_n;
            put(out, tj->unk_id, 0, n);
            return SM_OK;
        }
        put(out, id, start, end);
        if ((rc = poll_stop(out->stop, end - start))) return rc;
        start = end;
    }
    return SM_OK;
}

typedef struct {
    double score;
    size_t start;
    int id;
    int set;
} best_node;

static int unigram(const tj_pipeline *tj, const vocab *voc, const char *s, size_t n, sink *out,
                   char *err)
{
    double unk_score = tj->min_score - 10.0;
    best_node *b = calloc(n + 1, sizeof *b);
    size_t *stack = NULL, top = 0, e;
    int rc = SM_OK;
    if (!b) return SM_ERR_NOMEM;
    b[0].set = 1;
    for (size_t at = 0; at < n;) {
        cp_t c;
        size_t mb = dec(s + at, n - at, &c), end;
        int single = 0;
        double here = b[at].score;
        /* Every piece starting at `at`, shortest first, in one walk down
         * the trie: at most TJ_MAX_PIECE steps, one per byte. */
        uint32_t node = 0;
        for (end = at + 1; end <= n; end++) {
            if (!(node = vocab_trie_next(voc, node, (unsigned char)s[end - 1]))) break;
            if (end < n && ((unsigned char)s[end] & 0xC0) == 0x80) continue;
            int id = vocab_trie_id(voc, node);
            if (id < 0) continue;
            double cand = tj->scores[id] + here;
            if (!b[end].set || cand > b[end].score) {
                b[end].score = cand;
                b[end].start = at;
                b[end].id = id;
                b[end].set = 1;
            }
            if (end - at == mb) single = 1;
        }
        if (!single) {
            if (tj->unk_id < 0) {
                rc = sm_error(err, SM_ERR_FORMAT,
                              "tokenizer.json: a character "
                              "has no piece and the Unigram model has no unk_id");
                goto end;
            }
            double cand = unk_score + here;
            if (!b[at + mb].set || cand > b[at + mb].score) {
                b[at + mb].score = cand;
                b[at + mb].start = at;
                b[at + mb].id = tj->unk_id;
                b[at + mb].set = 1;
            }
        }
        at += mb;
        if ((out->stop->budget -= (long)mb) <= 0 && (rc = poll_stop(out->stop, 0))) goto end;
    }
    /* Walk back, then emit forward; runs of unknowns are fused into one
     * string that is looked up (or byte-fallen-back) as a whole. */
    stack = malloc((n + 1) * sizeof *stack);
    if (!stack) {
        rc = SM_ERR_NOMEM;
        goto end;
    }
    for (e = n; e > 0; e = b[e].start) stack[top++] = e;
    size_t prev = 0;
    while (top > 0 && !full(out)) {
        size_t end = stack[--top], st = prev;
        if (b[end].id == tj->unk_id) {
            while (top > 0 && b[stack[top - 1]].id == tj->unk_id) end = stack[--top];
        }
        prev = end;
        int id = b[end].id == tj->unk_id ? vocab_lookup(voc, s + st, end - st) : b[end].id;
        if (id >= 0) {
            put_v(out, id, st, end, s + st, end - st);
            continue;
        }
        if (tj->byte_fallback) {
            int ok = 1;
            for (size_t i = st; i < end; i++) ok &= tj->byte_ids[(unsigned char)s[i]] >= 0;
            if (ok) {
                for (size_t i = st; i < end; i++)
                    put(out, tj->byte_ids[(unsigned char)s[i]], st, end);
                continue;
            }
        }
        put_v(out, tj->unk_id, st, end, s + st, end - st);
    }
end:
    free(b);
    free(stack);
    return rc;
}

/* ---------------------------------------------------------------- running */

/* The longest added token at s[i..n), or -1. */
static int added_at(const tj_pipeline *tj, const char *s, size_t n, size_t i)
{
    int best = -1;
    unsigned char b = (unsigned char)s[i];
    if (!(tj->added_first[b >> 5] & (1u << (b & 31)))) return -1;
    for (int k = 0; k < tj->n_added; k++) {
        const added_tok *a = &tj->added[k];
        if (a->len <= n - i && memcmp(s + i, a->content, a->len) == 0 &&
            (best < 0 || a->len > tj->added[best].len))
            best = k;
    }
    return best;
}

/* s[0..n) through normalizer, pre-tokenizer and model; al: its
 * alignments (NULL when offsets are not kept). */
static int segment(const tj_pipeline *tj, const vocab *voc, const char *s, size_t n,
                   const int32_t *al, int first, sink *out, char *err)
{
    sbuf norm = {0};
    abuf norm_al = {0};
    pieces pc = {0};
    int rc;
    if (n == 0) return SM_OK;
    rc = normalize(tj, s, n, al, &norm, &norm_al, &first, out->stop, err);
    if (rc) return rc;
    rc = pre_tokenize(tj, norm.p ? norm.p : "", norm.n, al ? norm_al.p : NULL, first, out->stop,
                      &pc);
    for (size_t i = 0; i < pc.n && !rc && !full(out); i++) {
        const char *p = pc.text.p + pc.s[i].off;
        out->al = al ? pc.al.p + pc.s[i].off : NULL;
        rc = tj->model == M_UNIGRAM ? unigram(tj, voc, p, pc.s[i].len, out, err)
                                    : wordpiece(tj, voc, p, pc.s[i].len, out);
    }
    free(norm.p);
    free(norm_al.p);
    pc_free(&pc);
    return rc == SM_ERR_NOMEM ? sm_error(err, SM_ERR_NOMEM, "tokenizer: out of memory") : rc;
}

/* Whether the pipeline may cut a segment in two where seg_cut_ok holds
 * (set at load). Cuts at a space need: no Strip (it would strip the
 * space off the second part), no Replace that matches a space, a
 * Precompiled charsmap that keeps the space, and a first pre-tokenizer
 * that splits there (WhitespaceSplit, BertPreTokenizer, Metaspace with
 * split). Cuts between two ideographs need no Strip, a BertNormalizer
 * that pads ideographs with spaces and a first pre-tokenizer that splits
 * on white space (WhitespaceSplit, BertPreTokenizer). */
static void set_splits(tj_pipeline *tj)
{
    int strip = 0, space_replace = 0, bert_cjk = 0, pre;
    for (int k = 0; k < tj->n_norm; k++) {
        const norm_step *st = &tj->norm[k];
        strip |= st->kind == N_STRIP;
        if (st->kind == N_REPLACE)
            space_replace |= st->rep_char ? st->rep_char == ' ' : strchr(st->pat, ' ') != NULL;
        if (st->kind == N_PRECOMPILED)
            space_replace |= trie_first(tj, (const unsigned char *)" ", 1) >= 0;
        bert_cjk |= st->kind == N_BERT && st->chinese;
    }
    pre = tj->n_pre ? tj->pre[0].kind : 0;
    tj->split_space = !strip && !space_replace &&
                      (pre == P_WHITESPACE || pre == P_BERT ||
                       (pre == P_METASPACE && tj->pre[0].split));
    tj->split_cjk = !strip && !space_replace && bert_cjk && (pre == P_WHITESPACE || pre == P_BERT);
}

static int common_cjk(cp_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF);
}
static int ascii_alnum(cp_t c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

/* 1 when no normalizer step changes c, alone in its grapheme cluster, or
 * lets a Replace match run over it: a Precompiled charsmap without it,
 * Replace patterns without it (in either case). */
static int kept(const tj_pipeline *tj, cp_t c)
{
    char b[4], lb[4];
    size_t l = (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)b);
    cp_t lc = utf8proc_tolower(c);
    size_t ll = (size_t)utf8proc_encode_char(lc, (utf8proc_uint8_t *)lb);
    for (int k = 0; k < tj->n_norm; k++) {
        const norm_step *st = &tj->norm[k];
        if (st->kind == N_PRECOMPILED && trie_first(tj, (const unsigned char *)b, l) >= 0) return 0;
        if (st->kind == N_REPLACE &&
            (st->rep_char ? st->rep_char == c || st->rep_char == lc
                          : contains(st->pat, b, l) || contains(st->pat, lb, ll)))
            return 0;
    }
    return 1;
}

/* 1 when tokenizing s[0..p) and s[p..n) (not first) gives the ids of
 * s[0..n): w x | y z are the code points around p (w, z 0 at the ends).
 * At a space y before ASCII z after an ASCII letter or digit or an
 * ideograph x: every step keeps x and y where they are (each is its own
 * grapheme cluster, composes with nothing across, no Replace runs over
 * it), so the normalized text is the two parts' joined, and the first
 * pre-tokenizer splits at the space, so the pieces are too. Between two
 * ideographs x y: the same, and the BertNormalizer pads both with spaces,
 * where the pre-tokenizer splits. */
static int seg_cut_ok(const tj_pipeline *tj, cp_t w, cp_t x, cp_t y, cp_t z)
{
    int w_simple = w < 0x80 || common_cjk(w); /* 0 (the start) too */
    if (!w_simple || !(ascii_alnum(x) || common_cjk(x))) return 0;
    if (tj->split_space && y == ' ' && z > ' ' && z < 0x7F) return kept(tj, x);
    if (tj->split_cjk && common_cjk(x) && common_cjk(y) && (z < 0x80 || common_cjk(z)))
        return kept(tj, x) && kept(tj, y);
    return 0;
}

/* 1 when a Precompiled step drops what s[0..n) starts with (its first
 * grapheme cluster or character maps to ""): the alignments of the rest of
 * the segment then shift (lag_state), which cutting it would lose. */
static int drops_first(const tj_pipeline *tj, const char *s, size_t n)
{
    size_t j;
    cp_t c1, c2;
    utf8proc_int32_t state = 0;
    long v;
    if (n == 0 || !tj->trie_n) return 0;
    j = dec(s, n, &c1);
    size_t k1 = j;
    while (j < n && j < 6) {
        size_t k = dec(s + j, n - j, &c2);
        if (utf8proc_grapheme_break_stateful(c1, c2, &state)) break;
        c1 = c2;
        j += k;
    }
    if (j < 6 && (v = trie_first(tj, (const unsigned char *)s, j)) >= 0)
        return (size_t)v < tj->pool_n && tj->pool[v] == 0;
    v = trie_first(tj, (const unsigned char *)s, k1);
    return v >= 0 && (size_t)v < tj->pool_n && tj->pool[v] == 0;
}

/* Tokenizes the segment s[from..to) of the text s in parts of at least
 * tj->chunk bytes cut where seg_cut_ok holds, so that an encode that has
 * its ids stops before normalizing the rest (the ids are the same as for
 * the segment whole; tests compare the two). */
static int segment_parts(const tj_pipeline *tj, const vocab *voc, const char *s, size_t from,
                         size_t to, sink *out, char *err)
{
    size_t a = from;
    int rc = SM_OK;
    while (a < to && !rc && !full(out)) {
        size_t b = to;
        if (tj->chunk && (tj->split_space || tj->split_cjk) && to - a > tj->chunk &&
            !(out->starts && a == from && drops_first(tj, s + a, to - a))) {
            /* the code points w x | y z around each place from a + chunk on */
            size_t p = a + tj->chunk, q;
            cp_t w = 0, x = 0, y, z;
            while (p < to && ((unsigned char)s[p] & 0xC0) == 0x80) p++;
            for (q = p; q > a && ((unsigned char)s[q - 1] & 0xC0) == 0x80; q--)
                ;
            if (q > a) { /* x starts at q - 1 */
                size_t xs = q - 1, ws;
                dec(s + xs, p - xs, &x);
                for (ws = xs; ws > a && ((unsigned char)s[ws - 1] & 0xC0) == 0x80; ws--)
                    ;
                if (ws > a) dec(s + ws - 1, xs - (ws - 1), &w);
            }
            while (p < to) {
                size_t k = dec(s + p, to - p, &y), m = 0;
                z = 0;
                if (p + k < to) m = dec(s + p + k, to - p - k, &z);
                (void)m;
                if (x && seg_cut_ok(tj, w, x, y, z)) {
                    b = p;
                    break;
                }
                w = x;
                x = y;
                p += k;
            }
        }
        rc = segment(tj, voc, s + a, b - a, AL(out->text_al, a), a == 0, out, err);
        a = b;
    }
    return rc;
}

static int run(const tj_pipeline *tj, const vocab *voc, const char *text, size_t len, sink *out,
               char *err)
{
    sbuf s = {0};
    abuf s_al = {0}; /* with offsets: each repaired byte's code point's offset in text */
    size_t i = 0, seg = 0;
    int rc = SM_OK;

    if (len > TJ_MAX_TEXT)
        return sm_error(err, SM_ERR_INVALID,
                        "tokenizer: text of %zu bytes is "
                        "longer than %zu",
                        len, TJ_MAX_TEXT);
    while (i < len) { /* repair invalid UTF-8 */
        cp_t c;
        size_t k = utf8_next((const unsigned char *)text + i, len - i, &c);
        if (sb_cp(&s, c) || (out->starts && ab_fill(&s_al, s.n, (int32_t)i))) {
            free(s.p);
            free(s_al.p);
            return sm_error(err, SM_ERR_NOMEM, "tokenizer: out of memory");
        }
        i += k;
        if ((out->stop->budget -= (long)k) <= 0 && (rc = poll_stop(out->stop, 0))) {
            free(s.p);
            free(s_al.p);
            return rc;
        }
    }
    out->text_al = out->starts ? s_al.p : NULL;
    for (i = 0; i < s.n && !rc && !full(out);) {
        int k = added_at(tj, s.p, s.n, i);
        if (k < 0) {
            i++;
            if (--out->stop->budget <= 0) rc = poll_stop(out->stop, 0);
            continue;
        }
        const added_tok *a = &tj->added[k];
        size_t a0 = i, a1 = i + a->len;
        while (a->lstrip && a0 > seg) { /* white space before, back to seg */
            size_t k = 1;
            cp_t c;
            while (k < a0 - seg && ((unsigned char)s.p[a0 - k] & 0xC0) == 0x80) k++;
            dec(s.p + a0 - k, k, &c);
            if (!is_ws(c)) break;
            a0 -= k;
        }
        while (a->rstrip && a1 < s.n) {
            cp_t c;
            size_t k = dec(s.p + a1, s.n - a1, &c);
            if (!is_ws(c)) break;
            a1 += k;
        }
        rc = segment_parts(tj, voc, s.p, seg, a0, out, err);
        out->al = out->text_al;
        if (!rc && !full(out))
            put_v(out, a->id, a0, a1, s.p + a0, a1 - a0); /* the split, stripped space too */
        i = seg = a1;
    }
    if (!rc && !full(out)) rc = s.p ? segment_parts(tj, voc, s.p, seg, s.n, out, err) : SM_OK;
    free(s.p);
    free(s_al.p);
    return rc;
}

int tj_tokenize(const tj_pipeline *tj, const vocab *voc, const char *text, size_t len, int *ids,
                int cap, int *n_total, int (*stop)(void *), void *user, char *err)
{
    stopper st = {stop, user, stop ? TJ_POLL_BYTES : LONG_MAX, err};
    sink k = {ids, cap, 0, INT_MAX - 1, &st, NULL, NULL, NULL, NULL, NULL, NULL, voc};
    int rc = run(tj, voc, text ? text : "", len, &k, err);
    if (n_total) *n_total = k.n;
    return rc;
}

int tj_encode(const tj_pipeline *tj, const vocab *voc, const char *text, size_t len, int max_length,
              int *ids, int *n, int *truncated, int (*stop)(void *), void *user, char *err)
{
    return tj_encode_offsets(tj, voc, text, len, max_length, ids, NULL, NULL, n, truncated, stop,
                             user, err);
}

int tj_encode_offsets(const tj_pipeline *tj, const vocab *voc, const char *text, size_t len,
                      int max_length, int *ids, int *starts, int *ends, int *n, int *truncated,
                      int (*stop)(void *), void *user, char *err)
{
    stopper st = {stop, user, stop ? TJ_POLL_BYTES : LONG_MAX, err};
    int room = max_length - tj->n_before - tj->n_after, rc;
    if (room < 0)
        return sm_error(err, SM_ERR_INVALID,
                        "tokenizer_encode: max_length is %d, "
                        "expected at least %d (room for the special tokens)",
                        max_length, tj->n_before + tj->n_after);
    int keep = starts && ends, *trim = NULL;
    if (keep && tj->trim_offsets && room > 0 && !(trim = malloc(2 * (size_t)room * sizeof *trim)))
        return sm_error(err, SM_ERR_NOMEM, "tokenizer: out of memory");
    sink k = {ids + tj->n_before,
              room,
              0,
              room,
              &st,
              keep ? starts + tj->n_before : NULL,
              keep ? ends + tj->n_before : NULL,
              NULL,
              NULL,
              trim,
              trim ? trim + room : NULL,
              voc};
    rc = run(tj, voc, text ? text : "", len, &k, err);
    if (rc) {
        free(trim);
        return rc;
    }
    if (truncated) *truncated = k.n > room;
    if (k.n > room) k.n = room;
    for (int i = 0; i < tj->n_before; i++) ids[i] = tj->before[i];
    for (int i = 0; i < tj->n_after; i++) ids[tj->n_before + k.n + i] = tj->after[i];
    if (keep) {
        int *s0 = starts + tj->n_before, *e0 = ends + tj->n_before;
        utf8_offsets_to_chars((const unsigned char *)text, len, s0, k.n, 0);
        utf8_offsets_to_chars((const unsigned char *)text, len, e0, k.n, 1);
        /* RobertaProcessing's trim_offsets (tokenizers' byte-level
         * process_offsets, on character offsets): a token's span loses the
         * white space its string starts and ends with, except one leading
         * on the first token (add_prefix_space put it there). */
        for (int i = 0; trim && i < k.n; i++) {
            int l = trim[i], t = trim[room + i];
            if (l > 0) {
                if ((i == 0 || s0[i] == 0) && tj->trim_prefix && l == 1) l = 0;
                s0[i] = s0[i] + l < e0[i] ? s0[i] + l : e0[i];
            }
            if (t > 0 && e0[i] >= t) e0[i] = e0[i] - t > s0[i] ? e0[i] - t : s0[i];
        }
        for (int i = 0; i < tj->n_before; i++) starts[i] = ends[i] = 0;
        for (int i = 0; i < tj->n_after; i++)
            starts[tj->n_before + k.n + i] = ends[tj->n_before + k.n + i] = 0;
    }
    free(trim);
    if (n) *n = tj->n_before + k.n + tj->n_after;
    return SM_OK;
}

/* ---------------------------------------------------------------- loading */

static const char *type_of(const json_in_value *v)
{
    const json_in_value *t = json_in_get(v, "type");
    return json_in_is(t, JSON_IN_STRING) ? t->str : NULL;
}

static int get_bool(const json_in_value *obj, const char *key, int dflt, int *out,
                    const char *where, char *err)
{
    const json_in_value *v = json_in_get(obj, key);
    if (!v || v->type == JSON_IN_NULL) {
        *out = dflt;
        return SM_OK;
    }
    if (v->type != JSON_IN_TRUE && v->type != JSON_IN_FALSE)
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: %s '%s' must be "
                        "true or false",
                        where, key);
    *out = v->type == JSON_IN_TRUE;
    return SM_OK;
}

static int b64val(int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static int load_charsmap(tj_pipeline *tj, const json_in_value *v, char *err)
{
    const char *s;
    size_t n, m = 0;
    unsigned char *bin;
    uint32_t tsize;

    if (!json_in_is(v, JSON_IN_STRING))
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: Precompiled "
                        "'precompiled_charsmap' must be a base64 string");
    s = v->str;
    n = v->n;
    if (n % 4)
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: Precompiled "
                        "charsmap is not base64 (%zu characters, not a multiple of 4)",
                        n);
    bin = malloc(n / 4 * 3 + 1);
    if (!bin) return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
    for (size_t i = 0; i < n; i += 4) {
        int q[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            q[j] = b64val((unsigned char)s[i + j]);
            if (s[i + j] == '=' && i + 4 == n && j >= 2) {
                q[j] = 0;
                pad++;
            } else if (q[j] < 0 || pad) {
                free(bin);
                return sm_error(err, SM_ERR_FORMAT,
                                "tokenizer.json: Precompiled "
                                "charsmap is not base64 (bad character at %zu)",
                                i + j);
            }
        }
        uint32_t w = (uint32_t)(q[0] << 18 | q[1] << 12 | q[2] << 6 | q[3]);
        bin[m++] = (unsigned char)(w >> 16);
        if (pad < 2) bin[m++] = (unsigned char)(w >> 8);
        if (pad < 1) bin[m++] = (unsigned char)w;
    }
    if (m < 4) {
        free(bin);
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: Precompiled charsmap "
                        "of %zu bytes has no trie size",
                        m);
    }
    tsize = (uint32_t)bin[0] | (uint32_t)bin[1] << 8 | (uint32_t)bin[2] << 16 |
            (uint32_t)bin[3] << 24;
    if (tsize % 4 || tsize > m - 4 || tsize == 0) {
        free(bin);
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: Precompiled charsmap "
                        "trie of %u bytes does not fit its %zu-byte blob (truncated?)",
                        tsize, m);
    }
    tj->trie_n = tsize / 4;
    tj->trie = malloc(tsize);
    tj->pool_n = m - 4 - tsize;
    tj->pool = malloc(tj->pool_n + 1);
    if (!tj->trie || !tj->pool) {
        free(bin);
        return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
    }
    for (size_t i = 0; i < tj->trie_n; i++) {
        const unsigned char *p = bin + 4 + 4 * i;
        tj->trie[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                      (uint32_t)p[3] << 24;
    }
    memcpy(tj->pool, bin + 4 + tsize, tj->pool_n);
    tj->pool[tj->pool_n] = '\0';
    free(bin);
    return SM_OK;
}

static int unsupported(char *err, const char *what, const json_in_value *v)
{
    const char *t = type_of(v);
    if (!t) return sm_error(err, SM_ERR_FORMAT, "tokenizer.json: %s has no \"type\"", what);
    return sm_error(err, SM_ERR_UNSUPPORTED,
                    "tokenizer.json: %s '%.64s' is not "
                    "supported",
                    what, t);
}

/* Adds one step of type t (not a Sequence) to the pipeline. */
typedef int (*add_step_fn)(tj_pipeline *tj, const json_in_value *v, const char *t, char *err);

/* The value of "normalizer" or "pre_tokenizer" (`what`): null adds no
 * step, a Sequence the steps of its array `list` (at most 4 deep), any
 * other type one step, by add_one. */
static int add_steps(tj_pipeline *tj, const json_in_value *v, const char *what, const char *list,
                     add_step_fn add_one, int depth, char *err)
{
    const char *t = type_of(v);
    int rc;
    if (v->type == JSON_IN_NULL) return SM_OK;
    if (!t) return unsupported(err, what, v);
    if (strcmp(t, "Sequence") != 0) return add_one(tj, v, t, err);
    const json_in_value *a = json_in_get(v, list);
    if (!json_in_is(a, JSON_IN_ARRAY) || depth > 4)
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: %s Sequence needs a "
                        "'%s' array",
                        what, list);
    for (size_t i = 0; i < a->n; i++)
        if ((rc = add_steps(tj, &a->items[i], what, list, add_one, depth + 1, err))) return rc;
    return SM_OK;
}

static int add_norm_step(tj_pipeline *tj, const json_in_value *v, const char *t, char *err)
{
    norm_step *st;
    int rc;
    if (tj->n_norm == TJ_MAX_STEPS)
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "tokenizer.json: more than %d "
                        "normalizers",
                        TJ_MAX_STEPS);
    st = &tj->norm[tj->n_norm];
    memset(st, 0, sizeof *st);
    if (strcmp(t, "Precompiled") == 0) {
        if (tj->trie)
            return sm_error(err, SM_ERR_UNSUPPORTED,
                            "tokenizer.json: more than "
                            "one Precompiled normalizer");
        st->kind = N_PRECOMPILED;
        if ((rc = load_charsmap(tj, json_in_get(v, "precompiled_charsmap"), err))) return rc;
    } else if (strcmp(t, "Replace") == 0) {
        const json_in_value *p = json_in_get(v, "pattern"), *c = json_in_get(v, "content");
        const json_in_value *ps = json_in_get(p, "String"), *pr = json_in_get(p, "Regex");
        st->kind = N_REPLACE;
        if (!json_in_is(c, JSON_IN_STRING) ||
            !(json_in_is(ps, JSON_IN_STRING) || json_in_is(pr, JSON_IN_STRING)))
            return sm_error(err, SM_ERR_FORMAT,
                            "tokenizer.json: normalizer "
                            "Replace needs a String or Regex pattern and a content");
        if (ps) {
            if (ps->n == 0)
                return sm_error(err, SM_ERR_UNSUPPORTED,
                                "tokenizer.json: "
                                "Replace with an empty pattern is not supported");
            st->pat = strdup(ps->str);
        } else {
            /* One literal character (maybe escaped) then + or {n,}. */
            const char *r = pr->str;
            size_t k;
            cp_t ch;
            if (r[0] == '\\' && r[1] && strchr(".+*?()[]{}|^$\\ ", r[1])) r++;
            k = dec(r, strlen(r), &ch);
            const char *q = r + k;
            int min = 0;
            if (ch > 0 && !strchr(".+*?()[]{}|^$\\", (int)(ch < 128 ? ch : 'a')) &&
                strcmp(q, "+") == 0) {
                min = 1;
            } else if (ch > 0 && q[0] == '{') {
                char *e;
                long m = strtol(q + 1, &e, 10);
                if (e != q + 1 && strcmp(e, ",}") == 0 && m >= 1 && m < 1000) min = (int)m;
            }
            if (!min)
                return sm_error(err, SM_ERR_UNSUPPORTED,
                                "tokenizer.json: "
                                "normalizer Replace regex '%.64s' is not supported "
                                "(only one character with + or {n,})",
                                pr->str);
            st->rep_char = ch;
            st->rep_min = min;
            st->pat = strdup("");
        }
        st->content = strdup(c->str);
        if (!st->pat || !st->content) {
            step_free(st);
            return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
        }
    } else if (strcmp(t, "Strip") == 0) {
        st->kind = N_STRIP;
        if ((rc = get_bool(v, "strip_left", 1, &st->left, "Strip", err)) ||
            (rc = get_bool(v, "strip_right", 1, &st->right, "Strip", err)))
            return rc;
    } else if (strcmp(t, "NFC") == 0) {
        st->kind = N_NFC;
    } else if (strcmp(t, "NFD") == 0) {
        st->kind = N_NFD;
    } else if (strcmp(t, "NFKC") == 0) {
        st->kind = N_NFKC;
    } else if (strcmp(t, "NFKD") == 0) {
        st->kind = N_NFKD;
    } else if (strcmp(t, "Lowercase") == 0) {
        st->kind = N_LOWER;
    } else if (strcmp(t, "BertNormalizer") == 0) {
        const json_in_value *sa = json_in_get(v, "strip_accents");
        st->kind = N_BERT;
        if ((rc = get_bool(v, "clean_text", 1, &st->clean, "BertNormalizer", err)) ||
            (rc = get_bool(v, "handle_chinese_chars", 1, &st->chinese, "BertNormalizer", err)) ||
            (rc = get_bool(v, "lowercase", 1, &st->lowercase, "BertNormalizer", err)) ||
            (rc = get_bool(v, "strip_accents", st->lowercase, &st->strip_accents, "BertNormalizer",
                           err)))
            return rc;
        (void)sa;
    } else {
        return unsupported(err, "normalizer", v);
    }
    tj->n_norm++;
    return SM_OK;
}

static int add_pre_step(tj_pipeline *tj, const json_in_value *v, const char *t, char *err)
{
    pre_step *st;
    int rc;
    if (tj->n_pre == TJ_MAX_STEPS)
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "tokenizer.json: more than %d "
                        "pre-tokenizers",
                        TJ_MAX_STEPS);
    st = &tj->pre[tj->n_pre];
    memset(st, 0, sizeof *st);
    if (strcmp(t, "WhitespaceSplit") == 0) {
        st->kind = P_WHITESPACE;
    } else if (strcmp(t, "BertPreTokenizer") == 0) {
        st->kind = P_BERT;
    } else if (strcmp(t, "Metaspace") == 0) {
        const json_in_value *r = json_in_get(v, "replacement"),
                            *ps = json_in_get(v, "prepend_scheme");
        cp_t c;
        st->kind = P_METASPACE;
        if (!json_in_is(r, JSON_IN_STRING) || r->n == 0 || dec(r->str, r->n, &c) != r->n)
            return sm_error(err, SM_ERR_FORMAT,
                            "tokenizer.json: Metaspace "
                            "'replacement' must be one character");
        memcpy(st->rep, r->str, r->n + 1);
        st->rep_cp = c;
        if (json_in_is(ps, JSON_IN_STRING)) {
            if (strcmp(ps->str, "always") == 0) st->prepend = PREPEND_ALWAYS;
            else if (strcmp(ps->str, "first") == 0) st->prepend = PREPEND_FIRST;
            else if (strcmp(ps->str, "never") == 0) st->prepend = PREPEND_NEVER;
            else
                return sm_error(err, SM_ERR_FORMAT,
                                "tokenizer.json: Metaspace "
                                "prepend_scheme '%.32s'; expected always, first "
                                "or never",
                                ps->str);
        } else {
            int add = 1;
            if ((rc = get_bool(v, "add_prefix_space", 1, &add, "Metaspace", err))) return rc;
            st->prepend = add ? PREPEND_ALWAYS : PREPEND_NEVER;
        }
        if ((rc = get_bool(v, "split", 1, &st->split, "Metaspace", err))) return rc;
    } else {
        return unsupported(err, "pre_tokenizer", v);
    }
    tj->n_pre++;
    return SM_OK;
}

/* An id from JSON that must name a vocabulary entry. */
static int get_id(const json_in_value *v, int n_vocab, int *out, const char *what, char *err)
{
    if (!json_in_is(v, JSON_IN_NUMBER) || !v->is_int || v->i < 0 || v->i >= n_vocab)
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: %s must be an id in "
                        "[0, %d)",
                        what, n_vocab);
    *out = (int)v->i;
    return SM_OK;
}

/* A score as the Rust library holds it when it parses the file itself
 * (tokenizers' Tokenizer.from_file, transformers before 5; transformers 5's
 * XLMRobertaTokenizerFast reads the scores in Python, correctly rounded, and
 * builds the model from them). serde_json, as tokenizers builds it
 * (without its float_roundtrip feature), reads a decimal literal as a u64
 * significand s and a power of ten e and computes s as f64, then one
 * multiplication or division by 10^|e|: when s has more than 53 bits
 * (17-digit scores are common) that rounds twice and can land one unit in
 * the last place from the correctly rounded value, which decides ties in
 * the Viterbi search. The literal is taken to be the shortest decimal that
 * reads back as d, which is what serde_json (ryu) and Python's json write;
 * integer literals convert exactly as serde does (i64 as f64). */
static double serde_f64(const json_in_value *v)
{
    char buf[40];
    double d = v->d, a = d < 0 ? -d : d;
    int p;
    if (v->is_int || a == 0 || a != a || a > 1.7976931348623157e308) return d;
    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, a);
        if (strtod(buf, NULL) == a) break;
    }
    /* buf: D[.DDD]e[+-]XX */
    uint64_t sig = 0;
    int nd = 0, e10;
    const char *q = buf;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') {
            sig = sig * 10 + (uint64_t)(*q - '0');
            nd++;
        }
    e10 = atoi(q + 1) - (nd - 1);
    double f = (double)sig;
    for (;;) {
        int k = e10 < 0 ? -e10 : e10;
        if (k <= 308) {
            char pw[16];
            snprintf(pw, sizeof pw, "1e%d", k);
            double pow = strtod(pw, NULL);
            f = e10 >= 0 ? f * pow : f / pow;
            break;
        }
        if (f == 0 || e10 >= 0) break;
        f /= 1e308;
        e10 += 308;
    }
    return d < 0 ? -f : f;
}

static int load_model(tj_pipeline *tj, const json_in_value *m, int flags, vocab **out, char *err)
{
    const char *t = type_of(m);
    const json_in_value *entries = json_in_get(m, "vocab");
    const char **names = NULL;
    int rc, n;

    if (!m) return sm_error(err, SM_ERR_FORMAT, "tokenizer.json: no \"model\"");
    if (!t) return sm_error(err, SM_ERR_FORMAT, "tokenizer.json: model has no \"type\"");
    if (strcmp(t, "Unigram") == 0) {
        tj->model = M_UNIGRAM;
        if (!json_in_is(entries, JSON_IN_ARRAY))
            return sm_error(err, SM_ERR_FORMAT,
                            "tokenizer.json: Unigram 'vocab' "
                            "must be an array of [piece, score]");
    } else if (strcmp(t, "WordPiece") == 0) {
        tj->model = M_WORDPIECE;
        if (!json_in_is(entries, JSON_IN_OBJECT))
            return sm_error(err, SM_ERR_FORMAT,
                            "tokenizer.json: WordPiece 'vocab' "
                            "must be an object of token: id");
    } else {
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "tokenizer.json: model '%.64s' is "
                        "not supported; supported: WordPiece, Unigram",
                        t);
    }
    if (entries->n == 0)
        return sm_error(err, SM_ERR_FORMAT, "tokenizer.json: the %s vocab is empty", t);
    if (entries->n > (size_t)INT_MAX / 8)
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: %zu vocab entries is "
                        "too many",
                        entries->n);
    n = (int)entries->n;
    names = calloc((size_t)n, sizeof *names);
    if (!names) return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
    if (tj->model == M_UNIGRAM) {
        tj->scores = malloc((size_t)n * sizeof *tj->scores);
        if (!tj->scores) {
            rc = sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
            goto end;
        }
        tj->min_score = 1e300;
        for (int i = 0; i < n; i++) {
            const json_in_value *e = &entries->items[i];
            if (!json_in_is(e, JSON_IN_ARRAY) || e->n != 2 ||
                !json_in_is(&e->items[0], JSON_IN_STRING) ||
                !json_in_is(&e->items[1], JSON_IN_NUMBER)) {
                rc = sm_error(err, SM_ERR_FORMAT,
                              "tokenizer.json: Unigram vocab "
                              "entry %d is not [piece, score]",
                              i);
                goto end;
            }
            names[i] = e->items[0].str;
            if (e->items[0].n > TJ_MAX_PIECE) {
                rc = sm_error(err, SM_ERR_UNSUPPORTED,
                              "tokenizer.json: Unigram piece %d "
                              "is %zu bytes long; at most %d are supported",
                              i, e->items[0].n, TJ_MAX_PIECE);
                goto end;
            }
            tj->scores[i] = flags & TJ_RUST_SCORES ? serde_f64(&e->items[1]) : e->items[1].d;
            if (tj->scores[i] < tj->min_score) tj->min_score = tj->scores[i];
        }
        const json_in_value *u = json_in_get(m, "unk_id");
        tj->unk_id = -1;
        if (u && u->type != JSON_IN_NULL &&
            (rc = get_id(u, n, &tj->unk_id, "Unigram 'unk_id'", err)))
            goto end;
        if ((rc = get_bool(m, "byte_fallback", 0, &tj->byte_fallback, "Unigram", err))) goto end;
    } else {
        for (size_t i = 0; i < entries->n; i++) {
            const json_in_member *e = &entries->members[i];
            int id = -1;
            if ((rc = get_id(&e->value, n, &id, "a WordPiece vocab id", err))) goto end;
            if (names[id]) {
                rc = sm_error(err, SM_ERR_FORMAT,
                              "tokenizer.json: WordPiece id %d "
                              "is given to two tokens",
                              id);
                goto end;
            }
            names[id] = e->key;
            if (strlen(e->key) > TJ_MAX_PIECE) {
                rc = sm_error(err, SM_ERR_UNSUPPORTED,
                              "tokenizer.json: WordPiece token "
                              "%d is %zu bytes long; at most %d are supported",
                              id, strlen(e->key), TJ_MAX_PIECE);
                goto end;
            }
        }
        const json_in_value *u = json_in_get(m, "unk_token"),
                            *p = json_in_get(m, "continuing_subword_prefix"),
                            *mx = json_in_get(m, "max_input_chars_per_word");
        if (!json_in_is(u, JSON_IN_STRING)) {
            rc = sm_error(err, SM_ERR_FORMAT,
                          "tokenizer.json: WordPiece needs an "
                          "'unk_token'");
            goto end;
        }
        const json_in_value *uid = json_in_get(entries, u->str);
        if (!uid) {
            rc = sm_error(err, SM_ERR_FORMAT,
                          "tokenizer.json: WordPiece unk_token "
                          "'%.64s' is not in the vocab",
                          u->str);
            goto end;
        }
        tj->unk_id = (int)uid->i;
        if (p && p->type != JSON_IN_NULL) {
            if (!json_in_is(p, JSON_IN_STRING) || p->n >= sizeof tj->prefix) {
                rc = sm_error(err, SM_ERR_FORMAT,
                              "tokenizer.json: WordPiece "
                              "'continuing_subword_prefix' must be a short string");
                goto end;
            }
            memcpy(tj->prefix, p->str, p->n + 1);
            tj->prefix_len = p->n;
        } else {
            memcpy(tj->prefix, "##", 3);
            tj->prefix_len = 2;
        }
        tj->max_chars = 100;
        if (mx && mx->type != JSON_IN_NULL) {
            if (!json_in_is(mx, JSON_IN_NUMBER) || !mx->is_int || mx->i < 0 || mx->i > INT_MAX) {
                rc = sm_error(err, SM_ERR_FORMAT,
                              "tokenizer.json: WordPiece "
                              "'max_input_chars_per_word' must be a count");
                goto end;
            }
            tj->max_chars = (int)mx->i;
        }
    }
    rc = vocab_from_pieces(names, n, out, err);
    if (rc == SM_ERR_FORMAT) {
        char tmp[SM_ERR_MAX];
        snprintf(tmp, sizeof tmp, "tokenizer.json: %s", err ? err : "");
        if (err) snprintf(err, SM_ERR_MAX, "%s", tmp);
    }
    if (!rc && tj->byte_fallback) {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            tj->byte_ids[b] = vocab_lookup(*out, name, 6);
        }
    }
end:
    free(names);
    return rc;
}

static int load_added(tj_pipeline *tj, const json_in_value *a, int n_vocab, char *err)
{
    int rc;
    if (!a || a->type == JSON_IN_NULL) return SM_OK;
    if (!json_in_is(a, JSON_IN_ARRAY) || a->n > TJ_MAX_ADDED)
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: 'added_tokens' must be "
                        "an array of at most %d tokens",
                        TJ_MAX_ADDED);
    tj->added = calloc(a->n ? a->n : 1, sizeof *tj->added);
    if (!tj->added) return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
    for (size_t i = 0; i < a->n; i++) {
        const json_in_value *e = &a->items[i], *c = json_in_get(e, "content");
        added_tok *t = &tj->added[tj->n_added];
        int norm = 0, single = 0;
        if (!json_in_is(c, JSON_IN_STRING) || c->n == 0)
            return sm_error(err, SM_ERR_FORMAT,
                            "tokenizer.json: added token %zu "
                            "has no 'content'",
                            i);
        if ((rc = get_id(json_in_get(e, "id"), n_vocab, &t->id,
                         "an added token's "
                         "'id'",
                         err)) ||
            (rc = get_bool(e, "lstrip", 0, &t->lstrip, "added token", err)) ||
            (rc = get_bool(e, "rstrip", 0, &t->rstrip, "added token", err)) ||
            (rc = get_bool(e, "normalized", 0, &norm, "added token", err)) ||
            (rc = get_bool(e, "single_word", 0, &single, "added token", err)))
            return rc;
        if (c->n > TJ_MAX_PIECE)
            return sm_error(err, SM_ERR_UNSUPPORTED,
                            "tokenizer.json: added token %zu "
                            "is %zu bytes long; at most %d are supported",
                            i, c->n, TJ_MAX_PIECE);
        if (norm || single)
            return sm_error(err, SM_ERR_UNSUPPORTED,
                            "tokenizer.json: added token "
                            "'%.64s' with %s=true is not supported",
                            c->str, norm ? "normalized" : "single_word");
        t->content = strdup(c->str);
        if (!t->content) return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
        t->len = c->n;
        tj->added_first[(unsigned char)c->str[0] >> 5] |= 1u << ((unsigned char)c->str[0] & 31);
        tj->n_added++;
    }
    return SM_OK;
}

/* The ids of a special token named in the post-processor. */
static int template_ids(const json_in_value *specials, const char *name, int n_vocab, int *dst,
                        int *nd, char *err)
{
    const json_in_value *s = json_in_get(specials, name), *ids = json_in_get(s, "ids");
    int rc;
    if (!json_in_is(ids, JSON_IN_ARRAY))
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: TemplateProcessing "
                        "special token '%.64s' has no ids",
                        name);
    for (size_t i = 0; i < ids->n; i++) {
        if (*nd == TJ_MAX_TEMPLATE)
            return sm_error(err, SM_ERR_UNSUPPORTED,
                            "tokenizer.json: more than %d "
                            "special tokens around the text",
                            TJ_MAX_TEMPLATE);
        if ((rc = get_id(&ids->items[i], n_vocab, &dst[*nd], "a special token id", err))) return rc;
        (*nd)++;
    }
    return SM_OK;
}

static int load_post(tj_pipeline *tj, const json_in_value *p, int n_vocab, char *err)
{
    const char *t;
    int rc;
    if (!p || p->type == JSON_IN_NULL) return SM_OK;
    t = type_of(p);
    if (!t) return unsupported(err, "post_processor", p);
    if (strcmp(t, "TemplateProcessing") == 0) {
        const json_in_value *single = json_in_get(p, "single"),
                            *specials = json_in_get(p, "special_tokens");
        int seen_a = 0;
        if (!json_in_is(single, JSON_IN_ARRAY))
            return sm_error(err, SM_ERR_FORMAT,
                            "tokenizer.json: TemplateProcessing "
                            "needs a 'single' array");
        for (size_t i = 0; i < single->n; i++) {
            const json_in_value *e = &single->items[i], *sp = json_in_get(e, "SpecialToken"),
                                *sq = json_in_get(e, "Sequence");
            if (sq) {
                const json_in_value *id = json_in_get(sq, "id");
                if (seen_a || !json_in_is(id, JSON_IN_STRING) || strcmp(id->str, "A"))
                    return sm_error(err, SM_ERR_UNSUPPORTED,
                                    "tokenizer.json: "
                                    "TemplateProcessing 'single' must hold $A once");
                seen_a = 1;
            } else if (sp && json_in_is(json_in_get(sp, "id"), JSON_IN_STRING)) {
                rc = template_ids(specials, json_in_get(sp, "id")->str, n_vocab,
                                  seen_a ? tj->after : tj->before,
                                  seen_a ? &tj->n_after : &tj->n_before, err);
                if (rc) return rc;
            } else {
                return sm_error(err, SM_ERR_FORMAT,
                                "tokenizer.json: "
                                "TemplateProcessing item %zu is neither a "
                                "SpecialToken nor a Sequence",
                                i);
            }
        }
        if (!seen_a)
            return sm_error(err, SM_ERR_FORMAT,
                            "tokenizer.json: TemplateProcessing "
                            "'single' has no $A");
        return SM_OK;
    }
    if (strcmp(t, "BertProcessing") == 0 || strcmp(t, "RobertaProcessing") == 0) {
        const json_in_value *cls = json_in_get(p, "cls"), *sep = json_in_get(p, "sep");
        if (!json_in_is(cls, JSON_IN_ARRAY) || cls->n != 2 || !json_in_is(sep, JSON_IN_ARRAY) ||
            sep->n != 2)
            return sm_error(err, SM_ERR_FORMAT,
                            "tokenizer.json: %s needs 'cls' and "
                            "'sep' as [token, id]",
                            t);
        if ((rc = get_id(&cls->items[1], n_vocab, &tj->before[0], "the cls id", err)) ||
            (rc = get_id(&sep->items[1], n_vocab, &tj->after[0], "the sep id", err)))
            return rc;
        if (t[0] == 'R' && ((rc = get_bool(p, "trim_offsets", 1, &tj->trim_offsets, t, err)) ||
                            (rc = get_bool(p, "add_prefix_space", 1, &tj->trim_prefix, t, err))))
            return rc;
        tj->n_before = tj->n_after = 1;
        return SM_OK;
    }
    return unsupported(err, "post_processor", p);
}

static int named_id(const vocab *voc, const char *a, const char *b)
{
    int id = vocab_lookup(voc, a, strlen(a));
    return id >= 0 ? id : vocab_lookup(voc, b, strlen(b));
}

int tj_load(const char *json, size_t len, int flags, vocab **vocab_out, tj_pipeline **out,
            tj_special *sp, char *err)
{
    json_in_doc *doc = NULL;
    json_in_error je;
    const json_in_value *root;
    tj_pipeline *tj = NULL;
    vocab *voc = NULL;
    int rc;
    static const char *const known[] = {"version",      "truncation",     "padding",
                                        "added_tokens", "normalizer",     "pre_tokenizer",
                                        "model",        "post_processor", "decoder"};

    rc = json_in_parse(json ? json : "", len, &doc, &je);
    if (rc == SM_ERR_NOMEM) return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
    if (rc)
        return sm_error(err, SM_ERR_FORMAT,
                        "tokenizer.json: not valid JSON: line %d "
                        "column %d: %s",
                        je.line, je.column, je.reason);
    root = json_in_root(doc);
    if (!json_in_is(root, JSON_IN_OBJECT)) {
        rc = sm_error(err, SM_ERR_FORMAT, "tokenizer.json: the top level must be an object");
        goto fail;
    }
    for (size_t i = 0; i < root->n; i++) {
        size_t k;
        for (k = 0; k < sizeof known / sizeof *known; k++)
            if (strcmp(root->members[i].key, known[k]) == 0) break;
        if (k == sizeof known / sizeof *known) {
            rc = sm_error(err, SM_ERR_UNSUPPORTED,
                          "tokenizer.json: top-level key "
                          "'%.64s' is not supported",
                          root->members[i].key);
            goto fail;
        }
    }
    tj = calloc(1, sizeof *tj);
    if (!tj) {
        rc = sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
        goto fail;
    }
    tj->chunk = TJ_CHUNK;
    if (!json_in_get(root, "model")) {
        rc = sm_error(err, SM_ERR_FORMAT, "tokenizer.json: no \"model\"");
        goto fail;
    }
    if ((rc = load_model(tj, json_in_get(root, "model"), flags, &voc, err))) goto fail;
    const json_in_value *nv = json_in_get(root, "normalizer"),
                        *pv = json_in_get(root, "pre_tokenizer");
    if ((nv && (rc = add_steps(tj, nv, "normalizer", "normalizers", add_norm_step, 0, err))) ||
        (pv && (rc = add_steps(tj, pv, "pre_tokenizer", "pretokenizers", add_pre_step, 0, err))) ||
        (rc = load_added(tj, json_in_get(root, "added_tokens"), vocab_size(voc), err)) ||
        (rc = load_post(tj, json_in_get(root, "post_processor"), vocab_size(voc), err)))
        goto fail;
    set_splits(tj);
    sp->cls = tj->n_before ? tj->before[0] : -1;
    sp->sep = tj->n_after ? tj->after[0] : -1;
    sp->pad = named_id(voc, "<pad>", "[PAD]");
    sp->unk = tj->unk_id;
    sp->mask = named_id(voc, "<mask>", "[MASK]");
    json_in_free(doc);
    *vocab_out = voc;
    *out = tj;
    return SM_OK;
fail:
    json_in_free(doc);
    tj_free(tj);
    vocab_free(voc);
    return rc;
}
