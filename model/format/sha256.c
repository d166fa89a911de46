/* sha256.c: SHA-256 (FIPS 180-4): a portable block function and, on x86-64
 * CPUs with the SHA extensions, an SHA-NI one chosen at run time. Tested
 * against the NIST example vectors (tests/model/test_sha256.c).
 */
#include "format/sha256.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define SHA256_HAVE_SHANI 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void blocks_portable(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    uint32_t w[64];
    for (; nblocks; nblocks--, p += 64) {
        for (int t = 0; t < 16; t++)
            w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
                   (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
        for (int t = 16; t < 64; t++) {
            uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
            uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
            w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
        for (int t = 0; t < 64; t++) {
            uint32_t t1 = hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[t] +
                          w[t];
            uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            hh = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        h[0] += a;
        h[1] += b;
        h[2] += c;
        h[3] += d;
        h[4] += e;
        h[5] += f;
        h[6] += g;
        h[7] += hh;
    }
}

#ifdef SHA256_HAVE_SHANI
/* The state is kept as ABEF / CDGH, the layout sha256rnds2 works on. */
__attribute__((target("sha,sse4.1,ssse3"))) static void
blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)&h[0]);
    __m128i s1 = _mm_loadu_si128((const __m128i *)&h[4]);
    tmp = _mm_shuffle_epi32(tmp, 0xB1);       /* CDAB */
    s1 = _mm_shuffle_epi32(s1, 0x1B);         /* EFGH */
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8); /* ABEF */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);      /* CDGH */

    for (; nblocks; nblocks--, p += 64) {
        __m128i abef = s0, cdgh = s1, w;
        __m128i m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 0)), bswap);
        __m128i m1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16)), bswap);
        __m128i m2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 32)), bswap);
        __m128i m3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 48)), bswap);
/* four rounds on the words of m, group g (rounds 4g .. 4g+3) */
#define ROUNDS(m, g)                                                     \
    w = _mm_add_epi32(m, _mm_loadu_si128((const __m128i *)&K[4 * (g)])); \
    s1 = _mm_sha256rnds2_epu32(s1, s0, w);                               \
    w = _mm_shuffle_epi32(w, 0x0E);                                      \
    s0 = _mm_sha256rnds2_epu32(s0, s1, w)
/* the next four schedule words into a: a = W[t-16..], b = W[t-12..],
 * c = W[t-8..], d = W[t-4..] */
#define SCHED(a, b, c, d) \
    a = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(a, b), _mm_alignr_epi8(d, c, 4)), d)
        ROUNDS(m0, 0);
        ROUNDS(m1, 1);
        ROUNDS(m2, 2);
        ROUNDS(m3, 3);
        for (int g = 4; g < 16; g += 4) {
            SCHED(m0, m1, m2, m3);
            ROUNDS(m0, g);
            SCHED(m1, m2, m3, m0);
            ROUNDS(m1, g + 1);
            SCHED(m2, m3, m0, m1);
            ROUNDS(m2, g + 2);
            SCHED(m3, m0, m1, m2);
            ROUNDS(m3, g + 3);
        }
#undef ROUNDS
#undef SCHED
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);   /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);    /* DCHG */
    s0 = _mm_blend_epi16(tmp, s1, 0xF0); /* DCBA */
    s1 = _mm_alignr_epi8(s1, tmp, 8);    /* HGFE */
    _mm_storeu_si128((__m128i *)&h[0], s0);
    _mm_storeu_si128((__m128i *)&h[4], s1);
}

static int cpu_has_shani(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 9)) || !(c & (1u << 19))) return 0; /* SSSE3, SSE4.1 */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 29) & 1; /* SHA */
}
#endif

static int g_portable_forced;

static int use_shani(void)
{
#ifdef SHA256_HAVE_SHANI
    static int have = -1; /* a benign race: every thread computes the same */
    if (have < 0) have = cpu_has_shani();
    return have && !g_portable_forced;
#else
    return 0;
#endif
}

int sha256_uses_shani(void)
{
    return use_shani();
}

void sha256_force_portable(int on)
{
    g_portable_forced = on;
}

static void blocks(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
#ifdef SHA256_HAVE_SHANI
    if (use_shani()) {
        blocks_shani(h, p, nblocks);
        return;
    }
#endif
    blocks_portable(h, p, nblocks);
}

void sha256_init(sha256_ctx *c)
{
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, h0, sizeof h0);
    c->bytes = 0;
    c->n = 0;
}

void sha256_update(sha256_ctx *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    c->bytes += len;
    if (c->n) {
        size_t take = 64 - c->n < len ? 64 - c->n : len;
        memcpy(c->buf + c->n, p, take);
        c->n += take;
        p += take;
        len -= take;
        if (c->n < 64) return;
        blocks(c->h, c->buf, 1);
        c->n = 0;
    }
    if (len >= 64) {
        blocks(c->h, p, len / 64);
        p += len & ~(size_t)63;
        len &= 63;
    }
    memcpy(c->buf, p, len);
    c->n = len;
}

void sha256_final(sha256_ctx *c, uint8_t out[SHA256_DIGEST_LEN])
{
    uint64_t bits = c->bytes * 8;
    c->buf[c->n++] = 0x80;
    if (c->n > 56) {
        memset(c->buf + c->n, 0, 64 - c->n);
        blocks(c->h, c->buf, 1);
        c->n = 0;
    }
    memset(c->buf + c->n, 0, 56 - c->n);
    for (int i = 0; i < 8; i++) c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    blocks(c->h, c->buf, 1);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
    memset(c, 0, sizeof *c);
}

void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_LEN])
{
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, data, len);
    sha256_final(&c, out);
}

void sha256_hex(const uint8_t d[SHA256_DIGEST_LEN], char out[SHA256_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < SHA256_DIGEST_LEN; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[SHA256_HEX_LEN] = 0;
}
