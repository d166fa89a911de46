/* vocab.c: the vocabulary both tokenizers look tokens up in (vocab.h).
 *
 * Owns a private copy of the token bytes (one NUL-terminated string per
 * token), the per-id offset and length arrays, the open-addressing hash
 * table (FNV-1a, linear probing, a power-of-two size at least twice the
 * token count) from token bytes to id, and the byte trie of the tokens
 * (vocab_trie_next); vocab_free() releases all of it. Calls only errors.h
 * and utf8.h; knows nothing of tokenizers.
 *
 * The trie: node 0 is the root (the empty string); nodes are numbered
 * breadth first, so the children of node k are the nodes
 * first[k] .. first[k + 1] - 1, in ascending order of the byte on the edge
 * into each (edge[c]), and node_id[k] is the id of the token that ends at k
 * (the last id of a duplicate, as the hash table), or -1. The root's
 * children are also in a 256-entry table. One node per distinct token
 * prefix, 9 bytes each; built in O(total bytes + sort) from the tokens
 * sorted by their bytes.
 */
#include "core/errors.h"
#include "tokenize/utf8.h"
#include "tokenize/vocab.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A hash slot keeps short tokens inline, so the usual lookup (one
 * ideograph, or "##" and a few letters) touches one cache line. */
#define SLOT_KEY 8
typedef struct {
    uint32_t hash;
    int32_t id;         /* -1: empty slot */
    uint32_t len;       /* token bytes */
    char key[SLOT_KEY]; /* the first SLOT_KEY bytes of the token */
} slot;

struct vocab {
    char *text;          /* token bytes, each token NUL-terminated; owned */
    uint32_t *off;       /* id -> offset of its token in text */
    uint32_t *len;       /* id -> byte length of its token */
    int n;               /* number of ids */
    slot *table;         /* token bytes -> id; power-of-two size */
    uint32_t mask;       /* table size - 1 */
    size_t max_bytes;    /* longest token in bytes */
    uint32_t n_nodes;    /* trie nodes, the root included */
    uint32_t *first;     /* node -> its first child; n_nodes + 1 entries */
    int32_t *node_id;    /* node -> id of the token ending there, or -1 */
    unsigned char *edge; /* node -> the byte on the edge into it */
    uint32_t root[256];  /* the root's child per byte, 0 for none */
};

static uint32_t fnv_step(uint32_t h, const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}
#define FNV_SEED 2166136261u

/* Does the token in slot sl equal pre+s? */
static int slot_equals(const vocab *v, const slot *sl, const char *pre, size_t plen, const char *s,
                       size_t n)
{
    const char *t = sl->len <= SLOT_KEY ? sl->key : v->text + v->off[sl->id];
    size_t i;
    if (sl->len != plen + n) return 0;
    for (i = 0; i < plen; i++)
        if (t[i] != pre[i]) return 0;
    for (i = 0; i < n; i++)
        if (t[plen + i] != s[i]) return 0;
    return 1;
}

int vocab_lookup_prefixed(const vocab *v, const char *pre, size_t plen, const char *s, size_t n)
{
    uint32_t h = fnv_step(fnv_step(FNV_SEED, (const unsigned char *)pre, plen),
                          (const unsigned char *)s, n);
    for (uint32_t i = h & v->mask;; i = (i + 1) & v->mask) {
        const slot *sl = &v->table[i];
        if (sl->id < 0) return -1;
        if (sl->hash == h && slot_equals(v, sl, pre, plen, s, n)) return sl->id;
    }
}

int vocab_lookup(const vocab *v, const char *s, size_t n)
{
    return vocab_lookup_prefixed(v, "", 0, s, n);
}

/* Inserts id; a later duplicate replaces an earlier one, as in the Python
 * dict that load_vocab() builds. */
static void table_insert(vocab *v, int id)
{
    const char *s = v->text + v->off[id];
    size_t n = v->len[id];
    uint32_t h = fnv_step(FNV_SEED, (const unsigned char *)s, n);
    for (uint32_t i = h & v->mask;; i = (i + 1) & v->mask) {
        slot *sl = &v->table[i];
        if (sl->id < 0) {
            sl->hash = h;
            sl->id = id;
            sl->len = (uint32_t)n;
            memcpy(sl->key, s, n < SLOT_KEY ? n : SLOT_KEY);
            return;
        }
        if (sl->hash == h && slot_equals(v, sl, "", 0, s, n)) {
            sl->id = id;
            return;
        }
    }
}

/* Allocates an empty table for n tokens. */
static int table_alloc(vocab *v, int n)
{
    size_t cap = 16;
    while (cap < (size_t)n * 2) cap *= 2;
    v->table = malloc(cap * sizeof *v->table);
    if (!v->table) return SM_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) v->table[i].id = -1;
    v->mask = (uint32_t)(cap - 1);
    return SM_OK;
}

static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int32_t c;
        size_t k = utf8_next(s + i, n - i, &c);
        if (c == 0xFFFD && !(k == 3 && s[i] == 0xEF && s[i + 1] == 0xBF && s[i + 2] == 0xBD))
            return 0;
        i += k;
    }
    return 1;
}

/* Splits the copied text into lines in place. */
static int split_lines(vocab *v, size_t len, char *err)
{
    size_t n = 0, i, start;
    char *t = v->text;

    for (i = 0; i < len; i++)
        if (t[i] == '\n' || (t[i] == '\r' && (i + 1 == len || t[i + 1] != '\n'))) n++;
    if (len > 0 && t[len - 1] != '\n' && t[len - 1] != '\r') n++;
    if (n > (size_t)INT_MAX / 4 || len > UINT32_MAX - 1)
        return sm_error(err, SM_ERR_FORMAT, "vocab: %zu lines / %zu bytes is too large", n, len);
    v->off = malloc((n ? n : 1) * sizeof *v->off);
    v->len = malloc((n ? n : 1) * sizeof *v->len);
    if (!v->off || !v->len)
        return sm_error(err, SM_ERR_NOMEM, "vocab: out of memory for %zu lines", n);

    v->n = 0;
    for (i = 0, start = 0; i <= len && (size_t)v->n < n; i++) {
        int eol = i == len || t[i] == '\n' || t[i] == '\r';
        if (!eol) continue;
        if (!valid_utf8((const unsigned char *)t + start, i - start))
            return sm_error(err, SM_ERR_FORMAT, "vocab: line %d is not valid UTF-8", v->n + 1);
        v->off[v->n] = (uint32_t)start;
        v->len[v->n] = (uint32_t)(i - start);
        if (i - start > v->max_bytes) v->max_bytes = i - start;
        v->n++;
        if (i < len && t[i] == '\r' && i + 1 < len && t[i + 1] == '\n') t[i++] = '\0';
        if (i < len) t[i] = '\0';
        start = i + 1;
    }
    return SM_OK;
}

/* ------------------------------------------------------------------ trie */

typedef struct {
    const char *s;
    uint32_t len;
    int32_t id;
} tok_ref;

static int tok_ref_cmp(const void *a, const void *b)
{
    const tok_ref *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, m);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* A node of the trie while it is built: children in a sibling list. */
typedef struct {
    uint32_t child, sibling; /* 0: none (node 0 is the root, no one's child) */
    int32_t id;
    unsigned char byte;
} tmp_node;

/* Builds v's trie from its tokens (off, len, n set). */
static int trie_build(vocab *v, char *err)
{
    size_t total = 1, n = (size_t)v->n;
    tok_ref *refs = malloc((n ? n : 1) * sizeof *refs);
    uint32_t *path = malloc((v->max_bytes + 1) * sizeof *path);
    uint32_t *order = NULL;
    tmp_node *t = NULL;
    uint32_t nt = 1;
    int rc = SM_OK;

    for (size_t i = 0; i < n; i++) total += v->len[i];
    if (total > UINT32_MAX - 1) {
        rc = sm_error(err, SM_ERR_FORMAT, "vocab: more than 4 GB of tokens");
        goto end;
    }
    t = malloc(total * sizeof *t);
    if (!refs || !path || !t) {
        rc = sm_error(err, SM_ERR_NOMEM, "vocab: out of memory for the token trie");
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        refs[i].s = v->text + v->off[i];
        refs[i].len = v->len[i];
        refs[i].id = (int32_t)i;
    }
    qsort(refs, n, sizeof *refs, tok_ref_cmp);
    memset(&t[0], 0, sizeof t[0]);
    t[0].id = -1;
    path[0] = 0;
    /* In sorted order a new token shares lcp bytes with the one before
     * (path[0..lcp] is its path) and every node it adds is its parent's
     * last child, placed after the previous token's node at depth lcp + 1. */
    for (size_t i = 0; i < n; i++) {
        const tok_ref *r = &refs[i];
        size_t lcp = 0;
        if (i > 0) {
            const tok_ref *p = &refs[i - 1];
            size_t m = p->len < r->len ? p->len : r->len;
            while (lcp < m && p->s[lcp] == r->s[lcp]) lcp++;
            for (size_t d = lcp; d < r->len; d++) {
                uint32_t k = nt++;
                t[k].child = t[k].sibling = 0;
                t[k].id = -1;
                t[k].byte = (unsigned char)r->s[d];
                if (d == lcp && p->len > lcp) t[path[d + 1]].sibling = k;
                else t[path[d]].child = k;
                path[d + 1] = k;
            }
        } else {
            for (size_t d = 0; d < r->len; d++) {
                uint32_t k = nt++;
                t[k].child = t[k].sibling = 0;
                t[k].id = -1;
                t[k].byte = (unsigned char)r->s[d];
                t[path[d]].child = k;
                path[d + 1] = k;
            }
        }
        t[path[r->len]].id = r->id; /* sorted by id last: a duplicate's last id */
    }
    /* Breadth first, so each node's children are consecutive. */
    order = malloc((size_t)nt * sizeof *order);
    v->first = malloc(((size_t)nt + 1) * sizeof *v->first);
    v->node_id = malloc((size_t)nt * sizeof *v->node_id);
    v->edge = malloc(nt);
    if (!order || !v->first || !v->node_id || !v->edge) {
        rc = sm_error(err, SM_ERR_NOMEM, "vocab: out of memory for the token trie");
        goto end;
    }
    uint32_t tail = 1;
    order[0] = 0;
    for (uint32_t k = 0; k < nt; k++) {
        const tmp_node *x = &t[order[k]];
        v->first[k] = tail;
        v->node_id[k] = x->id;
        v->edge[k] = x->byte;
        for (uint32_t c = x->child; c; c = t[c].sibling) {
            if (k == 0) v->root[t[c].byte] = tail;
            order[tail++] = c;
        }
    }
    v->first[nt] = nt;
    v->n_nodes = nt;
end:
    free(refs);
    free(path);
    free(order);
    free(t);
    return rc;
}

uint32_t vocab_trie_next(const vocab *v, uint32_t node, unsigned char b)
{
    uint32_t lo, hi;
    if (node == 0) return v->root[b];
    lo = v->first[node];
    hi = v->first[node + 1];
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (v->edge[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->first[node + 1] && v->edge[lo] == b ? lo : 0;
}

int vocab_trie_id(const vocab *v, uint32_t node)
{
    return node < v->n_nodes ? v->node_id[node] : -1;
}

int vocab_from_lines(const char *text, size_t len, vocab **out, char *err)
{
    vocab *v;
    int rc;

    *out = NULL;
    v = calloc(1, sizeof *v);
    if (!v) return sm_error(err, SM_ERR_NOMEM, "vocab: out of memory");
    v->text = malloc(len + 1);
    if (!v->text) {
        rc = sm_error(err, SM_ERR_NOMEM, "vocab: out of memory for %zu bytes", len);
        goto fail;
    }
    if (len) memcpy(v->text, text, len);
    v->text[len] = '\0';
    /* A token holding a NUL could never be matched (text is cleaned of
     * control characters) nor shown whole: a damaged file, refused. */
    {
        const char *nul = len ? memchr(v->text, '\0', len) : NULL;
        if (nul) {
            size_t line = 1;
            for (const char *p = v->text; p < nul; p++) line += *p == '\n';
            rc = sm_error(err, SM_ERR_FORMAT, "vocab: line %zu holds a NUL byte", line);
            goto fail;
        }
    }
    rc = split_lines(v, len, err);
    if (rc) goto fail;
    if (table_alloc(v, v->n)) {
        rc = sm_error(err, SM_ERR_NOMEM, "vocab: out of memory for %d tokens", v->n);
        goto fail;
    }
    for (int id = 0; id < v->n; id++) table_insert(v, id);
    if ((rc = trie_build(v, err))) goto fail;
    *out = v;
    return SM_OK;
fail:
    vocab_free(v);
    return rc;
}

int vocab_from_pieces(const char *const *pieces, int n, vocab **out, char *err)
{
    vocab *v;
    size_t total = 0, at = 0;
    int rc;

    *out = NULL;
    if (n < 0 || n > INT_MAX / 4)
        return sm_error(err, SM_ERR_FORMAT, "vocab: %d tokens is out of range", n);
    for (int i = 0; i < n; i++) {
        total += strlen(pieces[i]) + 1;
        if (total > UINT32_MAX - 1)
            return sm_error(err, SM_ERR_FORMAT, "vocab: more than 4 GB of tokens");
    }
    v = calloc(1, sizeof *v);
    if (!v) return sm_error(err, SM_ERR_NOMEM, "vocab: out of memory");
    v->text = malloc(total + 1);
    v->off = malloc((n ? (size_t)n : 1) * sizeof *v->off);
    v->len = malloc((n ? (size_t)n : 1) * sizeof *v->len);
    if (!v->text || !v->off || !v->len || table_alloc(v, n)) {
        rc = sm_error(err, SM_ERR_NOMEM, "vocab: out of memory for %d tokens", n);
        goto fail;
    }
    for (int id = 0; id < n; id++) {
        size_t l = strlen(pieces[id]);
        int seen;
        memcpy(v->text + at, pieces[id], l + 1);
        v->off[id] = (uint32_t)at;
        v->len[id] = (uint32_t)l;
        if (l > v->max_bytes) v->max_bytes = l;
        at += l + 1;
        if ((seen = vocab_lookup(v, pieces[id], l)) >= 0) {
            rc = sm_error(err, SM_ERR_FORMAT,
                          "vocab: token %d is a duplicate of "
                          "token %d",
                          id, seen);
            goto fail;
        }
        table_insert(v, id);
        v->n = id + 1;
    }
    v->text[at] = '\0';
    v->n = n;
    if ((rc = trie_build(v, err))) goto fail;
    *out = v;
    return SM_OK;
fail:
    vocab_free(v);
    return rc;
}

int vocab_clone(const vocab *src, vocab **out, char *err)
{
    vocab *v;
    size_t text_len = 0, slots = (size_t)src->mask + 1;
    size_t ids = src->n ? (size_t)src->n : 1;
    int rc;

    *out = NULL;
    /* the tokens are all that is read of text: up to the last one's NUL */
    for (int id = 0; id < src->n; id++)
        if ((size_t)src->off[id] + src->len[id] + 1 > text_len)
            text_len = (size_t)src->off[id] + src->len[id] + 1;
    if (!text_len) text_len = 1;
    v = malloc(sizeof *v);
    if (!v) return sm_error(err, SM_ERR_NOMEM, "vocab: out of memory copying a tokenizer");
    *v = *src; /* the plain values; every pointer is replaced below */
    v->text = malloc(text_len);
    v->off = malloc(ids * sizeof *v->off);
    v->len = malloc(ids * sizeof *v->len);
    v->table = malloc(slots * sizeof *v->table);
    v->first = malloc(((size_t)src->n_nodes + 1) * sizeof *v->first);
    v->node_id = malloc((src->n_nodes ? src->n_nodes : 1) * sizeof *v->node_id);
    v->edge = malloc(src->n_nodes ? src->n_nodes : 1);
    if (!v->text || !v->off || !v->len || !v->table || !v->first || !v->node_id || !v->edge) {
        rc = sm_error(err, SM_ERR_NOMEM, "vocab: out of memory copying %d tokens", src->n);
        goto fail;
    }
    memcpy(v->text, src->text, text_len);
    memcpy(v->off, src->off, (size_t)src->n * sizeof *v->off);
    memcpy(v->len, src->len, (size_t)src->n * sizeof *v->len);
    memcpy(v->table, src->table, slots * sizeof *v->table);
    memcpy(v->first, src->first, ((size_t)src->n_nodes + 1) * sizeof *v->first);
    memcpy(v->node_id, src->node_id, src->n_nodes * sizeof *v->node_id);
    memcpy(v->edge, src->edge, src->n_nodes);
    *out = v;
    return SM_OK;
fail:
    vocab_free(v);
    return rc;
}

void vocab_free(vocab *v)
{
    if (!v) return;
    free(v->text);
    free(v->off);
    free(v->len);
    free(v->table);
    free(v->first);
    free(v->node_id);
    free(v->edge);
    free(v);
}

int vocab_size(const vocab *v)
{
    return v->n;
}
size_t vocab_max_token_bytes(const vocab *v)
{
    return v->max_bytes;
}

const char *vocab_token(const vocab *v, int id)
{
    if (id < 0 || id >= v->n) return NULL;
    return v->text + v->off[id];
}
