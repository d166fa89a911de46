/* ngram_hash.c: hashed character n-gram counts of a text (ngram_hash.h).
 * Owns the counters of an ngram_counts.
 */
#include "tokenize/ngram_hash.h"

#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "tokenize/utf8.h"

static uint32_t rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

int32_t ngram_murmur3_32(const void *key, size_t len, uint32_t seed)
{
    const uint8_t *data = key;
    const uint32_t c1 = 0xcc9e2d51u, c2 = 0x1b873593u;
    uint32_t h = seed, k;
    size_t nblocks = len / 4;
    for (size_t i = 0; i < nblocks; i++) {
        const uint8_t *p = data + 4 * i;
        k = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
        h = rotl32(h, 13);
        h = h * 5 + 0xe6546b64u;
    }
    const uint8_t *tail = data + 4 * nblocks;
    k = 0;
    switch (len & 3) {
    case 3: k ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: k ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1:
        k ^= tail[0];
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return (int32_t)h;
}

int ngram_bucket(int32_t h, int n)
{
    if (h == INT32_MIN) return (int)((INT32_MAX - (n - 1)) % n);
    return (int)((h < 0 ? -h : h) % n);
}

int ngram_counts_create(const sm_wide_config *cfg, ngram_counts **out, char *err)
{
    int rc;
    *out = NULL;
    if ((rc = sm_wide_config_check(cfg, err))) return rc;
    ngram_counts *nc = calloc(1, sizeof *nc);
    if (!nc) return sm_error(err, SM_ERR_NOMEM, "out of memory for n-gram counters");
    nc->buckets = cfg->buckets;
    *out = nc;
    return SM_OK;
}

void ngram_counts_free(ngram_counts *nc)
{
    if (!nc) return;
    free(nc->slot);
    free(nc->touched);
    free(nc->count);
    free(nc);
}

static size_t slot_of(int b, size_t cap)
{
    return ((uint32_t)b * 2654435761u) & (cap - 1);
}

/* Room for one more distinct bucket: the lists and a map at most half full. */
static int reserve(ngram_counts *nc)
{
    if ((size_t)nc->n_touched == nc->list_cap) {
        size_t cap = nc->list_cap ? 2 * nc->list_cap : 256;
        int *t = realloc(nc->touched, cap * sizeof *t);
        if (t) nc->touched = t;
        uint32_t *c = realloc(nc->count, cap * sizeof *c);
        if (c) nc->count = c;
        if (!t || !c) return SM_ERR_NOMEM;
        nc->list_cap = cap;
    }
    if (2 * ((size_t)nc->n_touched + 1) > nc->cap) {
        size_t cap = nc->cap ? 2 * nc->cap : 1024;
        int *slot = calloc(cap, sizeof *slot);
        if (!slot) return SM_ERR_NOMEM;
        for (int i = 0; i < nc->n_touched; i++) {
            size_t j = slot_of(nc->touched[i], cap);
            while (slot[j]) j = (j + 1) & (cap - 1);
            slot[j] = i + 1;
        }
        free(nc->slot);
        nc->slot = slot;
        nc->cap = cap;
    }
    return SM_OK;
}

static int count_bucket(ngram_counts *nc, int b)
{
    if (!nc->cap && reserve(nc)) return SM_ERR_NOMEM;
    size_t j = slot_of(b, nc->cap);
    while (nc->slot[j]) {
        int i = nc->slot[j] - 1;
        if (nc->touched[i] == b) {
            nc->count[i]++;
            return SM_OK;
        }
        j = (j + 1) & (nc->cap - 1);
    }
    size_t cap = nc->cap;
    if (reserve(nc)) return SM_ERR_NOMEM;
    if (nc->cap != cap) { /* the map grew: find the free slot again */
        j = slot_of(b, nc->cap);
        while (nc->slot[j]) j = (j + 1) & (nc->cap - 1);
    }
    nc->touched[nc->n_touched] = b;
    nc->count[nc->n_touched] = 1;
    nc->slot[j] = ++nc->n_touched;
    return SM_OK;
}

static void clear(ngram_counts *nc)
{
    for (int i = 0; i < nc->n_touched; i++) {
        size_t j = slot_of(nc->touched[i], nc->cap);
        while (nc->slot[j] != i + 1) j = (j + 1) & (nc->cap - 1);
        nc->slot[j] = 0;
    }
    nc->n_touched = 0;
}

/* Python's str.isspace. */
static int py_space(int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static int utf8_put(int32_t c, uint8_t *out)
{
    if (c < 0x80) {
        out[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (uint8_t)(0xC0 | c >> 6);
        out[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xE0 | c >> 12);
        out[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | c >> 18);
    out[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* The last SM_WIDE_MAX_NGRAM code points of the analysed text, as UTF-8,
 * with the byte span of the text each came from: a ring. */
typedef struct recent {
    uint8_t bytes[SM_WIDE_MAX_NGRAM][4];
    int len[SM_WIDE_MAX_NGRAM];
    size_t from[SM_WIDE_MAX_NGRAM], to[SM_WIDE_MAX_NGRAM];
    int head;  /* slot of the newest */
    long seen; /* code points so far */
} recent;

/* Adds code point c (from text bytes [from, to)) and calls each for the
 * n-grams that end with it. */
static int push(const sm_wide_config *cfg, recent *r, int32_t c, size_t from, size_t to,
                ngram_fn each, void *arg)
{
    uint8_t key[4 * SM_WIDE_MAX_NGRAM];
    r->head = (r->head + 1) % SM_WIDE_MAX_NGRAM;
    r->len[r->head] = utf8_put(c, r->bytes[r->head]);
    r->from[r->head] = from;
    r->to[r->head] = to;
    r->seen++;
    int avail = r->seen < cfg->ngram_max ? (int)r->seen : cfg->ngram_max;
    /* key holds the last n code points, built from the newest backwards */
    size_t off = sizeof key;
    for (int n = 1; n <= avail; n++) {
        int slot = (r->head - (n - 1) + SM_WIDE_MAX_NGRAM) % SM_WIDE_MAX_NGRAM;
        off -= (size_t)r->len[slot];
        memcpy(key + off, r->bytes[slot], (size_t)r->len[slot]);
        if (n < cfg->ngram_min) continue;
        int b = ngram_bucket(ngram_murmur3_32(key + off, sizeof key - off, 0), cfg->buckets);
        if (each(arg, b, r->from[slot], to)) return SM_ERR_NOMEM;
    }
    return SM_OK;
}

int ngram_walk(const sm_wide_config *cfg, const char *text, size_t len, ngram_fn each, void *arg,
               int (*stop)(void *user), void *user, char *err)
{
    const unsigned char *s = (const unsigned char *)text;
    recent r;
    memset(&r, 0, sizeof r);
    size_t i = 0, next_poll = 65536;
    while (i < len) {
        int32_t c;
        size_t from = i;
        i += utf8_next(s + i, len - i, &c);
        if (py_space(c) && i < len) {
            /* a run of two or more becomes one space */
            int32_t d;
            size_t step = utf8_next(s + i, len - i, &d);
            if (py_space(d)) {
                c = ' ';
                i += step;
                while (i < len && (step = utf8_next(s + i, len - i, &d)) && py_space(d)) i += step;
            }
        }
        if (cfg->lowercase && c >= 'A' && c <= 'Z') c += 'a' - 'A';
        if (push(cfg, &r, c, from, i, each, arg))
            return sm_error(err, SM_ERR_NOMEM, "out of memory counting n-grams");
        if (i >= next_poll) {
            next_poll = i + 65536;
            if (stop && stop(user)) return sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
        }
    }
    return SM_OK;
}

static int count_each(void *arg, int bucket, size_t from, size_t to)
{
    (void)from;
    (void)to;
    return count_bucket(arg, bucket);
}

int ngram_count_text(const sm_wide_config *cfg, const char *text, size_t len, ngram_counts *nc,
                     int (*stop)(void *user), void *user, char *err)
{
    clear(nc);
    if (nc->buckets != cfg->buckets)
        return sm_error(err, SM_ERR_INVALID, "n-gram counters for %d buckets, not %d", nc->buckets,
                        cfg->buckets);
    int rc = ngram_walk(cfg, text, len, count_each, nc, stop, user, err);
    if (rc) clear(nc);
    return rc;
}

int ngram_counts_find(const ngram_counts *nc, int bucket)
{
    if (!nc->cap) return -1;
    size_t j = slot_of(bucket, nc->cap);
    while (nc->slot[j]) {
        int i = nc->slot[j] - 1;
        if (nc->touched[i] == bucket) return i;
        j = (j + 1) & (nc->cap - 1);
    }
    return -1;
}
