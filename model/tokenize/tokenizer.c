/* tokenizer.c: Hugging Face BertTokenizer (the slow, pure-Python one:
 * BasicTokenizer + WordpieceTokenizer) ported to C, id for id, and the one
 * tokenizer type behind tokenizer.h for both vocab.txt and tokenizer.json.
 *
 * Owns the tokenizer struct: its vocabulary (vocab.c: token bytes and the
 * table from bytes to id), the special ids and, for a tokenizer.json
 * tokenizer, its pipeline (tokenizer_json.c), which tokenize and encode
 * hand the text to. Calls vocab.h, tokenizer_json.h, utf8.h, errors.h,
 * file_read.h and utf8proc; neither vocab.c nor tokenizer_json.c calls
 * back. Nothing is shared with the caller; tokenizer_free() releases all
 * of it. Each tokenize call owns a small workspace (stack buffers, heap only
 * for words longer than 256 code points) and frees it before returning, so
 * one tokenizer may be used by many threads at once. WordPiece walks the
 * vocabulary's byte trie once per subword (a word is at most 100 code
 * points), and the *_stoppable calls ask the caller's stop check every
 * TOKENIZER_POLL_BYTES of text.
 *
 * The pipeline, in the order transformers runs it for one text:
 *
 *   bytes --UTF-8, errors="replace"--> code points
 *   split on the special tokens present in the vocab ([CLS] [SEP] [PAD] [UNK]
 *     [MASK]); each match is emitted as its id (PreTrainedTokenizer.tokenize)
 *   per remaining segment (BasicTokenizer.tokenize):
 *     clean      drop U+0000, U+FFFD and every C* category except \t \n \r;
 *                \t \n \r and Zs become word breaks (U+2028/U+2029 also
 *                break words: Python's str.split() treats them as space)
 *     CJK        every ideograph in HF's _is_chinese_char ranges is a word
 *     NFC        (per word; NFC never composes across a space)
 *     a word equal to a special token string is kept whole (never_split)
 *     lower      if do_lower_case: str.lower() (full mapping: U+0130 -> i
 *                U+0307; final sigma), then NFD and drop Mn
 *     punct      split off every P* character and ASCII 33-47 58-64 91-96
 *                123-126
 *   WordPiece: greedy longest match, "##" continuation, [UNK] for a word that
 *   cannot be split or has more than 100 code points.
 *
 * Unicode data comes from utf8proc (Unicode 15.0 in utf8proc 2.8). The
 * reference is transformers on Python 3.11, whose unicodedata is Unicode
 * 14.0: the 4489 code points new in 15.0 are unassigned (Cn) there, so the
 * clean step drops them; unassigned_in_reference[] makes us drop them too.
 * Every other category, lower-case mapping and normalisation agrees with
 * Python's for every single code point (checked exhaustively), except where
 * noted: U+0130 and the final sigma (Python's full lower-casing) and
 * utf8proc's composition of U+11A7 (worked around in to_nfc()).
 *
 * Offsets (tokenizer_encode_offsets) follow BertTokenizerFast's
 * offset_mapping: every code point of a word carries the byte offsets of
 * the first and the last code point of the text it stands for (the same
 * one but where NFC composed several, which the fast tokenizer never does,
 * so the composed character spans them all; lower_strip_sources takes them
 * apart again as the fast tokenizer sees them). The steps run in two
 * inlined copies (TRACKED), so tokenizing without offsets costs what it
 * did; utf8.h turns the byte offsets into characters as SQLite counts them.
 *
 * Vocab lines end at "\n", "\r\n" or a lone "\r" (Python's universal
 * newlines, as load_vocab() reads the file); a duplicate token maps to its
 * last id, as the Python dict does (vocab_from_lines).
 */
#include "core/errors.h"
#include "format/file_read.h"
#include "tokenize/tokenizer.h"
#include "tokenize/tokenizer_json.h"
#include "tokenize/utf8.h"
#include "tokenize/vocab.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define MAX_WORD_CHARS 100 /* WordpieceTokenizer.max_input_chars_per_word */
#define MAX_TEXT_BYTES ((size_t)INT_MAX / 2)
#define N_SPECIAL 5
#define INLINE_CPS 256

/* The steps that keep offsets (tokenizer_encode_offsets) come in two
 * copies, inlined with the offsets on and off (a constant), so that plain
 * tokenizing runs the code it ran before they existed; their small
 * helpers are inlined as they were. */
#define TRACKED static inline __attribute__((always_inline))

typedef int32_t cp_t; /* one code point, as utf8proc wants it */

static const char *const special_names[N_SPECIAL] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
enum { SP_PAD, SP_UNK, SP_CLS, SP_SEP, SP_MASK };

struct tokenizer {
    vocab *vocab; /* token bytes <-> id; owned */
    int do_lower_case;
    int special[N_SPECIAL]; /* ids of special_names[], -1 if absent */
    tj_pipeline *json;      /* set for a tokenizer.json tokenizer: its pipeline */
};

/* ---------------------------------------------------------------- loading */

int tokenizer_load_buffer(const char *vocab_txt, size_t len, int do_lower_case, tokenizer **out,
                          char *err)
{
    tokenizer *tok;
    int rc;

    if (!out || (!vocab_txt && len))
        return sm_error(err, SM_ERR_INVALID, "tokenizer_load_buffer: NULL argument");
    *out = NULL;
    tok = calloc(1, sizeof *tok);
    if (!tok) return sm_error(err, SM_ERR_NOMEM, "vocab: out of memory");
    tok->do_lower_case = do_lower_case != 0;
    if ((rc = vocab_from_lines(vocab_txt, len, &tok->vocab, err))) goto fail;
    for (int k = 0; k < N_SPECIAL; k++) {
        const char *s = special_names[k];
        tok->special[k] = vocab_lookup(tok->vocab, s, strlen(s));
        if (tok->special[k] < 0 && k != SP_MASK) {
            rc = sm_error(err, SM_ERR_FORMAT,
                          "vocab: no %s token among %d lines; a BERT vocab.txt "
                          "needs [CLS], [SEP], [PAD] and [UNK]",
                          s, vocab_size(tok->vocab));
            goto fail;
        }
    }
    *out = tok;
    return SM_OK;
fail:
    tokenizer_free(tok);
    return rc;
}

/* A tokenizer from a file: its bytes (at most SM_FILE_MAX_VOCAB) handed
 * to load with arg; fn names the caller in the NULL argument error. */
static int load_file(const char *path, const char *fn,
                     int (*load)(const char *buf, size_t len, int arg, tokenizer **out, char *err),
                     int arg, tokenizer **out, char *err)
{
    char *buf = NULL;
    size_t n = 0;
    int rc;

    if (!path || !out) return sm_error(err, SM_ERR_INVALID, "%s: NULL argument", fn);
    *out = NULL;
    if ((rc = sm_file_read(path, SM_FILE_MAX_VOCAB, &buf, &n, err))) return rc;
    rc = load(buf, n, arg, out, err);
    free(buf);
    return rc;
}

int tokenizer_load_file(const char *path, int do_lower_case, tokenizer **out, char *err)
{
    return load_file(path, "tokenizer_load_file", tokenizer_load_buffer, do_lower_case, out, err);
}

int tokenizer_load_json_buffer(const char *json, size_t len, tokenizer **out, char *err)
{
    return tokenizer_load_json_buffer_flags(json, len, 0, out, err);
}

int tokenizer_load_json_buffer_flags(const char *json, size_t len, int flags, tokenizer **out,
                                     char *err)
{
    tj_pipeline *tj = NULL;
    vocab *v = NULL;
    tj_special sp;
    tokenizer *tok;
    int rc;

    if (!out || (!json && len))
        return sm_error(err, SM_ERR_INVALID, "tokenizer_load_json_buffer: NULL argument");
    *out = NULL;
    rc = tj_load(json, len, flags & TOKENIZER_JSON_RUST_SCORES ? TJ_RUST_SCORES : 0, &v, &tj, &sp,
                 err);
    if (rc) return rc;
    tok = calloc(1, sizeof *tok);
    if (!tok) {
        tj_free(tj);
        vocab_free(v);
        return sm_error(err, SM_ERR_NOMEM, "tokenizer.json: out of memory");
    }
    tok->vocab = v;
    tok->json = tj;
    tok->special[SP_CLS] = sp.cls;
    tok->special[SP_SEP] = sp.sep;
    tok->special[SP_PAD] = sp.pad;
    tok->special[SP_UNK] = sp.unk;
    tok->special[SP_MASK] = sp.mask;
    *out = tok;
    return SM_OK;
}

int tokenizer_load_json_file(const char *path, tokenizer **out, char *err)
{
    return tokenizer_load_json_file_flags(path, 0, out, err);
}

int tokenizer_load_json_file_flags(const char *path, int flags, tokenizer **out, char *err)
{
    return load_file(path, "tokenizer_load_json_file", tokenizer_load_json_buffer_flags, flags, out,
                     err);
}

int tokenizer_clone(const tokenizer *src, tokenizer **out, char *err)
{
    tokenizer *tok;
    int rc;

    *out = NULL;
    tok = malloc(sizeof *tok);
    if (!tok) return sm_error(err, SM_ERR_NOMEM, "vocab: out of memory copying a tokenizer");
    *tok = *src; /* the plain values; every pointer is replaced below */
    tok->vocab = NULL;
    tok->json = NULL;
    if ((rc = vocab_clone(src->vocab, &tok->vocab, err))) goto fail;
    if (src->json && (rc = tj_clone(src->json, vocab_size(src->vocab), &tok->json, err))) goto fail;
    *out = tok;
    return SM_OK;
fail:
    tokenizer_free(tok);
    return rc;
}

void tokenizer_free(tokenizer *tok)
{
    if (!tok) return;
    tj_free(tok->json);
    vocab_free(tok->vocab);
    free(tok);
}

int tokenizer_vocab_size(const tokenizer *tok)
{
    return tok ? vocab_size(tok->vocab) : 0;
}
int tokenizer_do_lower_case(const tokenizer *tok)
{
    return tok ? tok->do_lower_case : 0;
}
int tokenizer_cls_id(const tokenizer *tok)
{
    return tok ? tok->special[SP_CLS] : -1;
}
int tokenizer_sep_id(const tokenizer *tok)
{
    return tok ? tok->special[SP_SEP] : -1;
}
int tokenizer_pad_id(const tokenizer *tok)
{
    return tok ? tok->special[SP_PAD] : -1;
}
int tokenizer_unk_id(const tokenizer *tok)
{
    return tok ? tok->special[SP_UNK] : -1;
}
int tokenizer_mask_id(const tokenizer *tok)
{
    return tok ? tok->special[SP_MASK] : -1;
}

const char *tokenizer_token(const tokenizer *tok, int id)
{
    return tok ? vocab_token(tok->vocab, id) : NULL;
}

int tokenizer_lookup(const tokenizer *tok, const char *token, size_t len)
{
    if (!tok || (!token && len)) return -1;
    return vocab_lookup(tok->vocab, token ? token : "", len);
}

/* ------------------------------------------------------ character classes */

/* Assigned in utf8proc's Unicode tables but unassigned (Cn) in the Unicode
 * 14.0 data of the Python that generates the golden files, so HF's
 * _is_control() drops them. Sorted, inclusive. */
static const cp_t unassigned_in_reference[][2] = {
    {0x0CF3, 0x0CF3},   {0x0ECE, 0x0ECE},   {0x10EFD, 0x10EFF}, {0x1123F, 0x11241},
    {0x11B00, 0x11B09}, {0x11F00, 0x11F10}, {0x11F12, 0x11F3A}, {0x11F3E, 0x11F59},
    {0x1342F, 0x1342F}, {0x13439, 0x13455}, {0x1B132, 0x1B132}, {0x1B155, 0x1B155},
    {0x1D2C0, 0x1D2D3}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F},
    {0x1E4D0, 0x1E4F9}, {0x1F6DC, 0x1F6DC}, {0x1F774, 0x1F776}, {0x1F77B, 0x1F77F},
    {0x1F7D9, 0x1F7D9}, {0x1FA75, 0x1FA77}, {0x1FA87, 0x1FA88}, {0x1FAAD, 0x1FAAF},
    {0x1FABB, 0x1FABD}, {0x1FABF, 0x1FABF}, {0x1FACE, 0x1FACF}, {0x1FADA, 0x1FADB},
    {0x1FAE8, 0x1FAE8}, {0x1FAF7, 0x1FAF8}, {0x2B739, 0x2B739}, {0x31350, 0x323AF},
};

static int in_ranges(cp_t c, const cp_t (*r)[2], size_t n)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid][0]) hi = mid;
        else if (c > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* HF BasicTokenizer._is_chinese_char. */
static int is_cjk(cp_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

enum { CH_WORD, CH_SPACE, CH_DROP, CH_CJK };

/* ASCII: class and punctuation flag, built from HF's rules. */
static unsigned char ascii_class(cp_t c)
{
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return CH_SPACE;
    if (c < 0x20 || c == 0x7F) return CH_DROP;
    return CH_WORD;
}

static int ascii_punct(cp_t c)
{
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
}

/* What the clean + CJK steps do with one code point. */
static int char_class(cp_t c)
{
    if (c < 0x80) return ascii_class(c);
    if ((c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF))
        return CH_CJK; /* all assigned, the common case */
    if (c == 0xFFFD) return CH_DROP;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: return CH_DROP;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return CH_SPACE;
    default: break;
    }
    if (c >= 0x0CF3 &&
        in_ranges(c, unassigned_in_reference,
                  sizeof unassigned_in_reference / sizeof unassigned_in_reference[0]))
        return CH_DROP;
    return is_cjk(c) ? CH_CJK : CH_WORD;
}

TRACKED int is_punct(cp_t c)
{
    if (c < 0x80) return ascii_punct(c);
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* True when NFC may change a word containing c (c >= 0x300; everything
 * below is NFC-stable and composes only with a following mark, which is
 * itself flagged here). */
TRACKED int nfc_sensitive(cp_t c)
{
    if ((c >= 0x1100 && c <= 0x11FF) || (c >= 0xAC00 && c <= 0xD7A3))
        return 1; /* Hangul jamo and syllables compose algorithmically */
    const utf8proc_property_t *p = utf8proc_get_property(c);
    return p->combining_class != 0 || p->comb_index != UINT16_MAX ||
           (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0);
}

/* CPython's _PyUnicode_IsCaseIgnorable / _PyUnicode_IsCased, rebuilt from
 * categories; used only around a capital sigma. */
static int case_ignorable(cp_t c)
{
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK: return 1;
    default: break;
    }
    switch (c) { /* Word_Break MidLetter, MidNumLet, Single_Quote */
    case 0x27:
    case 0x2E:
    case 0x3A:
    case 0xB7:
    case 0x387:
    case 0x55F:
    case 0x5F4:
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0x2027:
    case 0xFE13:
    case 0xFE52:
    case 0xFE55:
    case 0xFF07:
    case 0xFF0E:
    case 0xFF1A: return 1;
    default: return 0;
    }
}

static int cased(cp_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT)
        return 1;
    if (c == 0xAA || c == 0xBA || (c >= 0x1F130 && c <= 0x1F149) ||
        (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
        return 1;
    return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c;
}

/* Python's Final_Sigma rule for the capital sigma at w[i]. */
static cp_t lower_sigma(const cp_t *w, size_t n, size_t i)
{
    size_t j = i;
    while (j > 0 && case_ignorable(w[j - 1])) j--;
    if (j == 0 || !cased(w[j - 1])) return 0x3C3;
    for (j = i + 1; j < n && case_ignorable(w[j]); j++)
        ;
    return (j == n || !cased(w[j])) ? 0x3C2 : 0x3C3;
}

/* ------------------------------------------------------------- workspace */

/* A growable code point buffer with inline storage for the usual short
 * word. */
typedef struct {
    cp_t *p;
    size_t n, cap;
    cp_t inl[INLINE_CPS];
} cpbuf;

static void cpbuf_init(cpbuf *b)
{
    b->p = b->inl;
    b->n = 0;
    b->cap = INLINE_CPS;
}

static void cpbuf_free(cpbuf *b)
{
    if (b->p != b->inl) free(b->p);
    cpbuf_init(b);
}

/* Makes room for `more` code points after b->n. */
static int cpbuf_reserve(cpbuf *b, size_t more, char *err)
{
    size_t need = b->n + more, cap = b->cap;
    if (need <= cap) return SM_OK;
    while (cap < need) cap *= 2;
    cp_t *np = b->p == b->inl ? malloc(cap * sizeof *np) : realloc(b->p, cap * sizeof *np);
    if (!np)
        return sm_error(err, SM_ERR_NOMEM,
                        "tokenizer: out of memory for a "
                        "word of %zu code points",
                        need);
    if (b->p == b->inl) memcpy(np, b->inl, b->n * sizeof *np);
    b->p = np;
    b->cap = cap;
    return SM_OK;
}

typedef struct {
    const tokenizer *tok;
    int *ids;                /* output, may be NULL when cap == 0 */
    int cap;                 /* ids written while n < cap */
    int n;                   /* ids produced so far */
    int limit;               /* stop once n > limit */
    int (*stop)(void *user); /* the caller's stop check, or NULL */
    void *user;
    long budget; /* bytes of text left before the next stop check */
    char *err;
    /* Offsets (tokenizer_encode_offsets): starts / ends, when not NULL,
     * get for each id written the byte offsets in the text of the first
     * and of the last code point it came from (the start of each). The
     * src and last buffers run beside word / nfc / low, filled only then:
     * for each code point the offset of the first and of the last code
     * point of the text it stands for (the same but where NFC composed
     * it: the slow tokenizer composes, the fast one, whose offsets these
     * are, does not, so a composed character spans what it was made of). */
    int *starts, *ends;
    cpbuf word; /* the word being collected */
    cpbuf nfc;  /* the word after NFC */
    cpbuf low;  /* the word after lower-casing + NFD + Mn removal */
    cpbuf word_src, nfc_src, low_src, nfc_last, low_last;
    cpbuf dec;     /* NFC's decomposed word, kept to align the composed one */
    cpbuf alt_src; /* lower_strip's sources of the word before NFC */
} workspace;

/* One id, from the code points whose sources start at text bytes a..b. */
static void emit(workspace *w, int id, cp_t a, cp_t b)
{
    if (w->n < w->cap) {
        w->ids[w->n] = id;
        if (w->starts) {
            w->starts[w->n] = a;
            w->ends[w->n] = b;
        }
    }
    w->n++;
}

static int done(const workspace *w)
{
    return w->n > w->limit;
}

/* Counts `bytes` of text read; every TOKENIZER_POLL_BYTES asks the
 * caller's stop check, SM_ERR_INTERRUPTED when it says stop. */
static int poll_stop(workspace *w, size_t bytes)
{
    w->budget -= (long)bytes;
    if (w->budget > 0) return SM_OK;
    w->budget = w->stop ? TOKENIZER_POLL_BYTES : LONG_MAX;
    return w->stop && w->stop(w->user) ? sm_error(w->err, SM_ERR_INTERRUPTED, "interrupted")
                                       : SM_OK;
}

/* --------------------------------------------------------------- WordPiece */

static size_t utf8_put(cp_t c, char *dst)
{
    return (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)dst);
}

/* WordpieceTokenizer.tokenize for one basic token of n code points: from
 * each start one walk down the vocabulary's trie (after "##" when not at
 * the word's start) finds the longest token there, in at most as many
 * steps as the word has bytes left (4 * MAX_WORD_CHARS). */
TRACKED void wordpiece_(workspace *w, const cp_t *cp, const cp_t *src, const cp_t *last, size_t n)
{
    const tokenizer *tok = w->tok;
    const vocab *v = tok->vocab;
    char bytes[4 * MAX_WORD_CHARS];
    uint16_t off[MAX_WORD_CHARS + 1];
    int sub[MAX_WORD_CHARS];
    unsigned char sub_end[MAX_WORD_CHARS]; /* each subword's end, in code points */
    size_t nsub = 0, start = 0;
    uint32_t cont;

    if (n == 0) return;
    if (n > MAX_WORD_CHARS) {
        emit(w, tok->special[SP_UNK], src ? src[0] : 0, src ? last[n - 1] : 0);
        return;
    }
    off[0] = 0;
    for (size_t i = 0; i < n; i++)
        off[i + 1] = (uint16_t)(off[i] + utf8_put(cp[i], bytes + off[i]));
    cont = vocab_trie_next(v, 0, '#');
    cont = cont ? vocab_trie_next(v, cont, '#') : 0;

    while (start < n) {
        uint32_t node = start ? cont : 0; /* 0 here: the root */
        size_t end = n;
        /* The whole rest, when it is a token, is the longest match: one
         * hash probe for the usual word (an ideograph, a short word). */
        int id = vocab_lookup_prefixed(v, "##", start ? 2 : 0, bytes + off[start],
                                       (size_t)(off[n] - off[start]));
        int alive = id < 0 && (!start || cont);
        for (size_t k = start; k < n && alive; k++) {
            /* the bytes of code point k, then a token may end */
            for (uint16_t b = off[k]; b < off[k + 1] && alive; b++)
                alive = (node = vocab_trie_next(v, node, (unsigned char)bytes[b])) != 0;
            if (!alive) break;
            int t = vocab_trie_id(v, node);
            if (t >= 0) {
                id = t;
                end = k + 1;
            }
        }
        if (id < 0) {
            emit(w, tok->special[SP_UNK], src ? src[0] : 0, src ? last[n - 1] : 0);
            return;
        }
        sub_end[nsub] = (unsigned char)end;
        sub[nsub++] = id;
        start = end;
    }
    if (!src) {
        for (size_t i = 0; i < nsub; i++) {
            if (w->n < w->cap) w->ids[w->n] = sub[i];
            w->n++;
        }
        return;
    }
    for (size_t i = 0, a = 0; i < nsub; a = sub_end[i++])
        emit(w, sub[i], src[a], last[sub_end[i] - 1]);
}

static __attribute__((noinline)) void wordpiece_plain(workspace *w, const cp_t *cp, size_t n)
{
    wordpiece_(w, cp, NULL, NULL, n);
}

static __attribute__((noinline)) void wordpiece_tracked(workspace *w, const cp_t *cp,
                                                        const cp_t *src, const cp_t *last, size_t n)
{
    wordpiece_(w, cp, src, last, n);
}

/* src / last: the sources of cp[0..n) (NULL: no offsets). */
static inline void wordpiece(workspace *w, const cp_t *cp, const cp_t *src, const cp_t *last,
                             size_t n)
{
    if (src) wordpiece_tracked(w, cp, src, last, n);
    else wordpiece_plain(w, cp, n);
}

/* ------------------------------------------------------- basic tokenizer */

/* The sources of a composed word: out[0..no) is the composition of
 * dec[0..nd) (whose sources are src / last[0..nd)); each composed code
 * point takes the source of the starter it was composed from and the last
 * source of what it absorbed, which is crossed off dec. Rewrites
 * src / last[0..no) in place. */
static void align_composed(const cp_t *out, size_t no, cp_t *dec, size_t nd, cp_t *src, cp_t *last)
{
    size_t j = 0;
    for (size_t k = 0; k < no && j < nd; k++, j++) {
        while (j < nd - 1 && dec[j] < 0) j++;
        cp_t a = src[j], e = last[j];
        if (out[k] != dec[j]) {
            cp_t d[8];
            int bc = UTF8PROC_BOUNDCLASS_START;
            utf8proc_ssize_t m = utf8proc_decompose_char(out[k], d, 8, UTF8PROC_DECOMPOSE, &bc);
            size_t q = j + 1;
            for (utf8proc_ssize_t t = 1; t < m && t <= 8; t++) {
                while (q < nd && dec[q] != d[t]) q++;
                if (q < nd) {
                    if (last[q] > e) e = last[q];
                    dec[q++] = -1;
                }
            }
        }
        src[k] = a;
        last[k] = e;
    }
}

/* Canonical ordering of b[0..n) (as utf8proc); with src, the sources move
 * with their code points, as tokenizers' alignments do. */
TRACKED void canonical_order(cp_t *b, cp_t *src, cp_t *last, size_t n)
{
    for (size_t i = 0; i + 1 < n;) {
        int c1 = utf8proc_get_property(b[i])->combining_class;
        int c2 = utf8proc_get_property(b[i + 1])->combining_class;
        if (c1 > c2 && c2 > 0) {
            cp_t t = b[i];
            b[i] = b[i + 1];
            b[i + 1] = t;
            if (src) {
                t = src[i];
                src[i] = src[i + 1];
                src[i + 1] = t;
                t = last[i];
                last[i] = last[i + 1];
                last[i + 1] = t;
            }
            if (i > 0) i--;
            else i++;
        } else {
            i++;
        }
    }
}

/* NFC of cp[0..n) into w->nfc (canonical decomposition, canonical order,
 * composition: what utf8proc_NFC does, on code points); with src / last
 * (cp's sources), w->nfc_src / nfc_last get w->nfc's. */
static int to_nfc(workspace *w, const cp_t *cp, const cp_t *src, const cp_t *last, size_t n)
{
    cpbuf *b = &w->nfc, *bs = &w->nfc_src, *bl = &w->nfc_last;
    int bc = UTF8PROC_BOUNDCLASS_START;
    b->n = 0;
    bs->n = 0;
    bl->n = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = cpbuf_reserve(b, 8, w->err);
        if (rc) return rc;
        utf8proc_ssize_t k = utf8proc_decompose_char(cp[i], b->p + b->n, 8, UTF8PROC_COMPOSE, &bc);
        if (k < 0 || k > 8)
            return sm_error(w->err, SM_ERR_INVALID, "tokenizer: cannot normalise U+%04X",
                            (unsigned)cp[i]);
        b->n += (size_t)k;
        if (src) {
            if ((rc = cpbuf_reserve(bs, 8, w->err)) || (rc = cpbuf_reserve(bl, 8, w->err)))
                return rc;
            for (utf8proc_ssize_t j = 0; j < k; j++) {
                bs->p[bs->n++] = src[i];
                bl->p[bl->n++] = last[i];
            }
        }
    }
    canonical_order(b->p, src ? bs->p : NULL, bl->p, b->n);
    if (src) { /* the decomposed word, to align the composed one with */
        w->dec.n = 0;
        int rc = cpbuf_reserve(&w->dec, b->n, w->err);
        if (rc) return rc;
        memcpy(w->dec.p, b->p, b->n * sizeof *b->p);
        w->dec.n = b->n;
    }
    /* Compose. utf8proc would swallow U+11A7 (the Hangul TBASE, which is
     * no trailing consonant) after an LV syllable; it is a starter that
     * composes with nothing, so composing the runs between such code points
     * separately is exact. STABLE honours the composition exclusions
     * (U+2ADC stays decomposed). */
    size_t out = 0, start = 0;
    for (size_t i = 0; i <= b->n; i++) {
        if (i < b->n && b->p[i] != 0x11A7) continue;
        utf8proc_ssize_t m = utf8proc_normalize_utf32(b->p + start, (utf8proc_ssize_t)(i - start),
                                                      UTF8PROC_COMPOSE | UTF8PROC_STABLE);
        if (m < 0) return sm_error(w->err, SM_ERR_INVALID, "tokenizer: NFC failed");
        memmove(b->p + out, b->p + start, (size_t)m * sizeof *b->p);
        out += (size_t)m;
        if (i < b->n) b->p[out++] = 0x11A7;
        start = i + 1;
    }
    b->n = out;
    if (src) {
        align_composed(b->p, b->n, w->dec.p, w->dec.n, bs->p, bl->p);
        bs->n = bl->n = b->n;
    }
    return SM_OK;
}

/* str.lower(), then NFD, then drop Mn (HF _run_strip_accents), into w->low;
 * with src / last (cp's sources), w->low_src / low_last get w->low's:
 * every code point a character becomes has its sources, except that one
 * NFC composed decomposes again into its first source (the starter) and
 * its last (the marks), as the fast tokenizer, which never composed,
 * sees them. */
TRACKED int lower_strip(workspace *w, const cp_t *cp, const cp_t *src, const cp_t *last, size_t n)
{
    cpbuf *b = &w->low, *bs = &w->low_src, *bl = &w->low_last;
    int bc = UTF8PROC_BOUNDCLASS_START;
    b->n = 0;
    bs->n = 0;
    bl->n = 0;
    for (size_t i = 0; i < n; i++) {
        cp_t lc[2];
        size_t n0 = b->n;
        int nl = 1, rc = cpbuf_reserve(b, 16, w->err);
        if (rc) return rc;
        if (cp[i] == 0x130) { /* SpecialCasing: I WITH DOT ABOVE */
            lc[0] = 'i';
            lc[1] = 0x307;
            nl = 2;
        } else if (cp[i] == 0x3A3) {
            lc[0] = lower_sigma(cp, n, i);
        } else {
            lc[0] = utf8proc_tolower(cp[i]);
        }
        for (int j = 0; j < nl; j++) {
            if (lc[j] < 0xC0) { /* nothing below U+00C0 decomposes */
                b->p[b->n++] = lc[j];
                continue;
            }
            utf8proc_ssize_t k = utf8proc_decompose_char(lc[j], b->p + b->n, 8, UTF8PROC_DECOMPOSE,
                                                         &bc);
            if (k < 0 || k > 8)
                return sm_error(w->err, SM_ERR_INVALID, "tokenizer: cannot decompose U+%04X",
                                (unsigned)lc[j]);
            b->n += (size_t)k;
        }
        if (src) {
            if ((rc = cpbuf_reserve(bs, 16, w->err)) || (rc = cpbuf_reserve(bl, 16, w->err)))
                return rc;
            int composed = src[i] != last[i] && b->n - n0 > 1;
            for (size_t j = n0; j < b->n; j++) {
                cp_t v = composed && j > n0 ? last[i] : src[i];
                bs->p[bs->n++] = composed ? v : src[i];
                bl->p[bl->n++] = composed ? v : last[i];
            }
        }
    }
    /* Canonical ordering, then drop Mn. */
    canonical_order(b->p, src ? bs->p : NULL, bl->p, b->n);
    size_t m = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->p[i] < 0x300 || utf8proc_category(b->p[i]) != UTF8PROC_CATEGORY_MN) {
            if (src) {
                bs->p[m] = bs->p[i];
                bl->p[m] = bl->p[i];
            }
            b->p[m++] = b->p[i];
        }
    b->n = m;
    if (src) bs->n = bl->n = m;
    return SM_OK;
}

/* The fast tokenizer lower-cases and strips the word as it is, never
 * composed: lower_strip of the word before NFC (w->word) into w->dec, its
 * sources into w->alt_src. When that gives the same code points as
 * lower_strip after NFC (it does but for odd cases), its sources are the
 * fast tokenizer's, also where NFC composed and NFD took apart again. */
static int lower_strip_sources(workspace *w)
{
    int rc = lower_strip(w, w->word.p, w->word_src.p, w->word_src.p, w->word.n);
    if (rc) return rc;
    w->dec.n = 0;
    w->alt_src.n = 0;
    if ((rc = cpbuf_reserve(&w->dec, w->low.n, w->err)) ||
        (rc = cpbuf_reserve(&w->alt_src, w->low.n, w->err)))
        return rc;
    memcpy(w->dec.p, w->low.p, w->low.n * sizeof *w->low.p);
    memcpy(w->alt_src.p, w->low_src.p, w->low.n * sizeof *w->low.p);
    w->dec.n = w->alt_src.n = w->low.n;
    return SM_OK;
}

/* 1 when code point c (a word character) is, after lower-casing and NFD,
 * nothing but nonspacing marks (Mn): what the accent strip removes. */
static int only_marks(cp_t c)
{
    cp_t d[8];
    int bc = UTF8PROC_BOUNDCLASS_START;
    utf8proc_ssize_t k;

    if (c < 0x300) return 0;
    k = utf8proc_decompose_char(utf8proc_tolower(c), d, 8, UTF8PROC_DECOMPOSE, &bc);
    if (k <= 0 || k > 8) return 0;
    for (utf8proc_ssize_t i = 0; i < k; i++)
        if (d[i] < 0x300 || utf8proc_category(d[i]) != UTF8PROC_CATEGORY_MN) return 0;
    return 1;
}

int tokenizer_text_blank(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;

    while (i < len) {
        cp_t c;
        int cls;
        if (s[i] < 0x80) {
            c = s[i++];
            cls = ascii_class(c);
        } else {
            i += utf8_next(s + i, len - i, &c);
            cls = char_class(c);
        }
        if (cls == CH_SPACE || cls == CH_DROP) continue;
        if (cls == CH_CJK || !only_marks(c)) return 0;
    }
    return 1;
}

/* A word that is exactly a special token string: HF passes
 * all_special_tokens as never_split, so it is neither lower-cased nor split
 * (WordPiece then finds it whole, or not at all when the vocab lacks it). */
TRACKED int special_word(const cp_t *cp, size_t n)
{
    if (n < 5 || n > 6 || cp[0] != '[' || cp[n - 1] != ']') return 0;
    for (int k = 0; k < N_SPECIAL; k++) {
        const char *s = special_names[k];
        size_t i;
        if (strlen(s) != n) continue;
        for (i = 0; i < n && cp[i] == (cp_t)(unsigned char)s[i]; i++)
            ;
        if (i == n) return 1;
    }
    return 0;
}

/* _run_split_on_punc + WordPiece on each piece. */
TRACKED void split_punct(workspace *w, const cp_t *cp, const cp_t *src, const cp_t *last, size_t n)
{
    size_t start = 0;
#define AT(p, i) ((p) ? (p) + (i) : NULL)
    for (size_t i = 0; i < n && !done(w); i++) {
        if (!is_punct(cp[i])) continue;
        wordpiece(w, cp + start, AT(src, start), AT(last, start), i - start);
        wordpiece(w, cp + i, AT(src, i), AT(last, i), 1);
        start = i + 1;
    }
    if (!done(w)) wordpiece(w, cp + start, AT(src, start), AT(last, start), n - start);
#undef AT
}

/* One whitespace-delimited, CJK-free word (in w->word) through NFC,
 * never_split, lower-casing and the punctuation split. */
TRACKED int process_word_(workspace *w, int nfc, const int track)
{
    cp_t *cp = w->word.p;
    const cp_t *src = track ? w->word_src.p : NULL, *last = src;
    size_t n = w->word.n;
    int rc;

    if (nfc) {
        rc = to_nfc(w, cp, src, last, n);
        if (rc) return rc;
        cp = w->nfc.p;
        src = src ? w->nfc_src.p : NULL;
        last = src ? w->nfc_last.p : NULL;
        n = w->nfc.n;
    }
    if (special_word(cp, n)) {
        wordpiece(w, cp, src, last, n);
        return SM_OK;
    }
    if (w->tok->do_lower_case) {
        int ascii = 1;
        for (size_t i = 0; i < n && ascii; i++) ascii = cp[i] < 0x80;
        if (ascii) {
            for (size_t i = 0; i < n; i++)
                if (cp[i] >= 'A' && cp[i] <= 'Z') cp[i] += 'a' - 'A';
        } else {
            if (src && nfc && (rc = lower_strip_sources(w))) return rc;
            rc = src ? lower_strip(w, cp, src, last, n) : lower_strip(w, cp, NULL, NULL, n);
            if (rc) return rc;
            if (src && nfc && w->dec.n == w->low.n &&
                !memcmp(w->dec.p, w->low.p, w->low.n * sizeof *w->low.p)) {
                memcpy(w->low_src.p, w->alt_src.p, w->low.n * sizeof *w->low.p);
                memcpy(w->low_last.p, w->alt_src.p, w->low.n * sizeof *w->low.p);
            }
            cp = w->low.p;
            src = src ? w->low_src.p : NULL;
            last = src ? w->low_last.p : NULL;
            n = w->low.n;
        }
    }
    split_punct(w, cp, src, last, n);
    return SM_OK;
}

static int process_word(workspace *w, int nfc)
{
    return w->starts ? process_word_(w, nfc, 1) : process_word_(w, nfc, 0);
}

/* An ideograph is a word of its own; NFC maps a compatibility ideograph to
 * its unified one, and nothing else in the pipeline changes it. */
TRACKED void emit_cjk(workspace *w, cp_t c, cp_t src /* -1: no offsets */)
{
    if ((c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F)) {
        cp_t d[4];
        int bc = UTF8PROC_BOUNDCLASS_START;
        if (utf8proc_decompose_char(c, d, 4, UTF8PROC_COMPOSE, &bc) == 1) c = d[0];
    }
    wordpiece(w, &c, src >= 0 ? &src : NULL, &src, 1);
}

/* BasicTokenizer.tokenize + WordPiece for one segment free of special
 * tokens. */
TRACKED int basic_segment_(workspace *w, const unsigned char *s, size_t len, size_t base,
                           const int track)
{
    size_t i = 0, at = 0; /* at: where the code point c starts */
    int nfc = 0, rc;

    w->word.n = 0;
    while (i < len && !done(w)) {
        cp_t c;
        int cls;
        at = i;
        if (s[i] < 0x80) {
            c = s[i++];
            cls = ascii_class(c);
            if (--w->budget <= 0 && (rc = poll_stop(w, 0)) != SM_OK) return rc;
        } else {
            size_t k = utf8_next(s + i, len - i, &c);
            i += k;
            cls = char_class(c);
            if ((w->budget -= (long)k) <= 0 && (rc = poll_stop(w, 0)) != SM_OK) return rc;
        }
        if (cls == CH_WORD) {
            if (w->word.n == w->word.cap && (rc = cpbuf_reserve(&w->word, 1, w->err)) != SM_OK)
                return rc;
            if (track) {
                w->word_src.n = w->word.n;
                if ((rc = cpbuf_reserve(&w->word_src, 1, w->err)) != SM_OK) return rc;
                w->word_src.p[w->word_src.n++] = (cp_t)(base + at);
            }
            w->word.p[w->word.n++] = c;
            if (c >= 0x300 && !nfc) nfc = nfc_sensitive(c);
            continue;
        }
        if (cls == CH_DROP) continue;
        if (w->word.n) { /* a break ends the word */
            rc = process_word(w, nfc);
            if (rc) return rc;
            w->word.n = 0;
            nfc = 0;
        }
        if (cls == CH_CJK && !done(w)) emit_cjk(w, c, track ? (cp_t)(base + at) : -1);
    }
    if (w->word.n && !done(w)) return process_word(w, nfc);
    return SM_OK;
}

static int basic_segment(workspace *w, const unsigned char *s, size_t len, size_t base)
{
    return w->starts ? basic_segment_(w, s, len, base, 1) : basic_segment_(w, s, len, base, 0);
}

/* The special token (present in the vocab) starting at s[0..n), or -1. */
static int special_at(const tokenizer *tok, const char *s, size_t n, size_t *mlen)
{
    for (int k = 0; k < N_SPECIAL; k++) {
        size_t l = strlen(special_names[k]);
        if (tok->special[k] >= 0 && l <= n && memcmp(s, special_names[k], l) == 0) {
            *mlen = l;
            return tok->special[k];
        }
    }
    return -1;
}

/* The whole text: split on special tokens (all ASCII, so a byte search on
 * the raw text finds exactly what HF's trie finds on the decoded text), and
 * run the basic tokenizer on what lies between. */
static int run(workspace *w, const char *text, size_t len)
{
    size_t seg = 0, i = 0, seen = 0;
    while (i < len && !done(w)) {
        const char *p = memchr(text + i, '[', len - i);
        size_t mlen = 0;
        int id;
        if (!p) break;
        i = (size_t)(p - text);
        if (i - seen >= TOKENIZER_POLL_BYTES) { /* a long run of '[' not special */
            int rc = poll_stop(w, i - seen);
            if (rc) return rc;
            seen = i;
        }
        id = special_at(w->tok, p, len - i, &mlen);
        if (id < 0) {
            i++;
            continue;
        }
        int rc = basic_segment(w, (const unsigned char *)text + seg, i - seg, seg);
        if (rc) return rc;
        if (!done(w)) emit(w, id, (cp_t)i, (cp_t)(i + mlen - 1));
        i += mlen;
        seg = i;
    }
    if (done(w)) return SM_OK;
    return basic_segment(w, (const unsigned char *)text + seg, len - seg, seg);
}

static int tokenize_limited(const tokenizer *tok, const char *text, size_t len, int *ids,
                            int *starts, int *ends, int cap, int limit, int (*stop)(void *),
                            void *user, int *n_out, char *err)
{
    workspace w;
    int rc;

    if (!tok || (!text && len) || cap < 0 || (!ids && cap > 0))
        return sm_error(err, SM_ERR_INVALID, "tokenizer: NULL or negative argument");
    if (len > MAX_TEXT_BYTES)
        return sm_error(err, SM_ERR_INVALID, "tokenizer: text of %zu bytes is longer than %zu", len,
                        MAX_TEXT_BYTES);
    memset(&w, 0, offsetof(workspace, word));
    w.tok = tok;
    w.ids = ids;
    w.cap = cap;
    w.limit = limit;
    w.stop = stop;
    w.user = user;
    w.budget = stop ? TOKENIZER_POLL_BYTES : LONG_MAX;
    w.err = err;
    w.starts = starts && ends ? starts : NULL;
    w.ends = w.starts ? ends : NULL;
    cpbuf_init(&w.word);
    cpbuf_init(&w.nfc);
    cpbuf_init(&w.low);
    cpbuf_init(&w.word_src);
    cpbuf_init(&w.nfc_src);
    cpbuf_init(&w.low_src);
    cpbuf_init(&w.nfc_last);
    cpbuf_init(&w.low_last);
    cpbuf_init(&w.dec);
    cpbuf_init(&w.alt_src);
    rc = len ? run(&w, text, len) : SM_OK;
    cpbuf_free(&w.word);
    cpbuf_free(&w.nfc);
    cpbuf_free(&w.low);
    cpbuf_free(&w.word_src);
    cpbuf_free(&w.nfc_src);
    cpbuf_free(&w.low_src);
    cpbuf_free(&w.nfc_last);
    cpbuf_free(&w.low_last);
    cpbuf_free(&w.dec);
    cpbuf_free(&w.alt_src);
    *n_out = w.n;
    return rc;
}

int tokenizer_tokenize_stoppable(const tokenizer *tok, const char *text, size_t len, int *ids,
                                 int cap, int *n_total, int (*stop)(void *user), void *user,
                                 char *err)
{
    int n = 0, rc;
    if (tok && tok->json) {
        if ((!text && len) || cap < 0 || (!ids && cap > 0))
            return sm_error(err, SM_ERR_INVALID, "tokenizer: NULL or negative argument");
        return tj_tokenize(tok->json, tok->vocab, text, len, ids, cap, n_total, stop, user, err);
    }
    rc = tokenize_limited(tok, text, len, ids, NULL, NULL, cap, INT_MAX, stop, user, &n, err);
    if (n_total) *n_total = n;
    return rc;
}

int tokenizer_tokenize(const tokenizer *tok, const char *text, size_t len, int *ids, int cap,
                       int *n_total, char *err)
{
    return tokenizer_tokenize_stoppable(tok, text, len, ids, cap, n_total, NULL, NULL, err);
}

/* Byte spans (the first and the last code point's start, -1 for the
 * framing) to characters (utf8.h). */
static void finish_offsets(const char *text, size_t len, int *starts, int *ends, int n)
{
    utf8_offsets_to_chars((const unsigned char *)text, len, starts, n, 0);
    utf8_offsets_to_chars((const unsigned char *)text, len, ends, n, 1);
}

/* tokenizer_encode for a vocab.txt tokenizer: [CLS], the WordPiece ids
 * (their byte spans into starts / ends + 1 unless NULL) cut to
 * max_length - 2, [SEP]; *body the ids between the two. */
static int wordpiece_encode(const tokenizer *tok, const char *text, size_t len, int max_length,
                            int *ids, int *starts, int *ends, int *body, int *truncated,
                            int (*stop)(void *user), void *user, char *err)
{
    int rc;
    if (!tok || !ids || max_length < 2)
        return sm_error(err, SM_ERR_INVALID,
                        "tokenizer_encode: max_length is %d, expected at least 2 "
                        "(room for [CLS] and [SEP])",
                        max_length);
    /* Stop as soon as one token more than fits is seen. */
    rc = tokenize_limited(tok, text, len, ids + 1, starts ? starts + 1 : NULL,
                          ends ? ends + 1 : NULL, max_length - 2, max_length - 2, stop, user, body,
                          err);
    if (rc) return rc;
    if (truncated) *truncated = *body > max_length - 2;
    if (*body > max_length - 2) *body = max_length - 2;
    ids[0] = tok->special[SP_CLS];
    ids[*body + 1] = tok->special[SP_SEP];
    return SM_OK;
}

int tokenizer_encode_stoppable(const tokenizer *tok, const char *text, size_t len, int max_length,
                               int *ids, int *n, int *truncated, int (*stop)(void *user),
                               void *user, char *err)
{
    int body = 0, rc;

    if (tok && tok->json) {
        if (!ids || (!text && len))
            return sm_error(err, SM_ERR_INVALID, "tokenizer_encode: NULL argument");
        return tj_encode(tok->json, tok->vocab, text, len, max_length, ids, n, truncated, stop,
                         user, err);
    }
    rc = wordpiece_encode(tok, text, len, max_length, ids, NULL, NULL, &body, truncated, stop, user,
                          err);
    if (rc) return rc;
    if (n) *n = body + 2;
    return SM_OK;
}

int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int max_length, int *ids,
                     int *n, int *truncated, char *err)
{
    return tokenizer_encode_stoppable(tok, text, len, max_length, ids, n, truncated, NULL, NULL,
                                      err);
}

int tokenizer_encode_offsets(const tokenizer *tok, const char *text, size_t len, int max_length,
                             int *ids, int *starts, int *ends, int *n, int *truncated,
                             int (*stop)(void *user), void *user, char *err)
{
    int body = 0, total = 0, rc;

    if (!starts || !ends)
        return tokenizer_encode_stoppable(tok, text, len, max_length, ids, n, truncated, stop, user,
                                          err);
    if (tok && tok->json) {
        if (!ids || (!text && len))
            return sm_error(err, SM_ERR_INVALID, "tokenizer_encode: NULL argument");
        rc = tj_encode_offsets(tok->json, tok->vocab, text, len, max_length, ids, starts, ends,
                               &total, truncated, stop, user, err);
        if (rc) return rc;
        if (n) *n = total;
        return SM_OK;
    }
    rc = wordpiece_encode(tok, text, len, max_length, ids, starts, ends, &body, truncated, stop,
                          user, err);
    if (rc) return rc;
    starts[0] = ends[0] = starts[body + 1] = ends[body + 1] = -1;
    finish_offsets(text, len, starts, ends, body + 2);
    if (n) *n = body + 2;
    return SM_OK;
}
