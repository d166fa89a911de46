/* ngram_hash.c: hashed character n-gram counts of a text (ngram_hash.h).
 * Owns the counters of an ngram_counts.
 */
#include "ngram_hash.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "utf8.h"

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
    if (nc) nc->count = calloc((size_t)cfg->buckets, sizeof *nc->count);
    if (nc && nc->count) nc->touched = malloc((size_t)cfg->buckets * sizeof *nc->touched);
    if (!nc || !nc->count || !nc->touched) {
        ngram_counts_free(nc);
        return sm_error(err, SM_ERR_NOMEM, "out of memory for %d n-gram buckets", cfg->buckets);
    }
    nc->buckets = cfg->buckets;
    *out = nc;
    return SM_OK;
}

void ngram_counts_free(ngram_counts *nc)
{
    if (!nc) return;
    free(nc->count);
    free(nc->touched);
    free(nc);
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

/* The last SM_WIDE_MAX_NGRAM code points of the analysed text, as UTF-8:
 * a ring of their encodings. */
typedef struct recent {
    uint8_t bytes[SM_WIDE_MAX_NGRAM][4];
    int len[SM_WIDE_MAX_NGRAM];
    int head;  /* slot of the newest */
    long seen; /* code points so far */
} recent;

static void count_one(ngram_counts *nc, const uint8_t *key, size_t len)
{
    int b = ngram_bucket(ngram_murmur3_32(key, len, 0), nc->buckets);
    if (nc->count[b]++ == 0) nc->touched[nc->n_touched++] = b;
}

/* Adds code point c and counts the n-grams that end with it. */
static void push(const sm_wide_config *cfg, recent *r, int32_t c, ngram_counts *nc)
{
    uint8_t key[4 * SM_WIDE_MAX_NGRAM];
    r->head = (r->head + 1) % SM_WIDE_MAX_NGRAM;
    r->len[r->head] = utf8_put(c, r->bytes[r->head]);
    r->seen++;
    int avail = r->seen < cfg->ngram_max ? (int)r->seen : cfg->ngram_max;
    /* key holds the last n code points, built from the newest backwards */
    size_t off = sizeof key;
    for (int n = 1; n <= avail; n++) {
        int slot = (r->head - (n - 1) + SM_WIDE_MAX_NGRAM) % SM_WIDE_MAX_NGRAM;
        off -= (size_t)r->len[slot];
        memcpy(key + off, r->bytes[slot], (size_t)r->len[slot]);
        if (n >= cfg->ngram_min) count_one(nc, key + off, sizeof key - off);
    }
}

int ngram_count_text(const sm_wide_config *cfg, const char *text, size_t len, ngram_counts *nc,
                     int (*stop)(void *user), void *user, char *err)
{
    const unsigned char *s = (const unsigned char *)text;
    recent r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < nc->n_touched; i++) nc->count[nc->touched[i]] = 0;
    nc->n_touched = 0;
    if (nc->buckets != cfg->buckets)
        return sm_error(err, SM_ERR_INVALID, "n-gram counters for %d buckets, not %d",
                        nc->buckets, cfg->buckets);
    size_t i = 0, next_poll = 65536;
    while (i < len) {
        int32_t c;
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
        push(cfg, &r, c, nc);
        if (i >= next_poll) {
            next_poll = i + 65536;
            if (stop && stop(user)) {
                for (int t = 0; t < nc->n_touched; t++) nc->count[nc->touched[t]] = 0;
                nc->n_touched = 0;
                return sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
            }
        }
    }
    return SM_OK;
}
