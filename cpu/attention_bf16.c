/* attention_bf16.c: one (sequence, head) of inference attention with its
 * two products in BF16 (AVX512-BF16), for a model whose linear layers run
 * packed BF16 or INT8 weights (attention.h).
 *
 * The steps of attention.c per block of SR query rows, with each product's
 * operands rounded to BF16 (to nearest even, as gemm_bf16_round) and
 * summed in FP32 by vdpbf16ps, which adds two products per lane (the odd
 * element's, then the even's): half the instructions of an FMA each.
 * - scores: a key's BF16 row is d/2 pairs (dimensions 2i, 2i + 1); the
 *   keys are rounded and transposed once into kw[i][u] (pair i of key u,
 *   keys padded with zeros to a multiple of 16), and the block's query rows
 *   into qw[r][i]; an SR x 32 tile keeps 2 x SR accumulators while i runs
 *   over the d/2 pairs: per i two loads of kw and for each row one
 *   broadcast of its pair and two vdpbf16ps;
 * - the masked row softmax in FP32 (softmax.h) given the rows' largest
 *   scores, as attention.c: att gets the FP32 probabilities; the block's
 *   rows are then rounded to BF16 pairs of keys (2j, 2j + 1) into pw;
 * - values: the values are rounded once into vw[j][i] (dimension i of keys
 *   2j and 2j + 1 as one pair; past len a zero key), and a VR x d tile of
 *   the output runs over the key pairs: per j, d/16 loads of vw and for
 *   each row one broadcast of its pair of probabilities and d/16
 *   vdpbf16ps.
 * A score or output differs from attention.c's by the rounding of its
 * operands to 8 significant bits (relative 2^-9 each), the same order as
 * the INT8 layers' per-row quantization of their inputs (8 bits over a
 * row's range) and below the BF16 layers' own rounding.
 *
 * Owns nothing past a call (the rounded copies are on the stack or
 * freed).
 */
#include "cpu/attention.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/features.h"
#include "cpu/gemm_common.h"
#include "cpu/softmax.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_BF16_ATTENTION 1
#define AVX512BF16_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#include "cpu/attention_simd.h"
#include "cpu/bf16_round.h"
#endif

#define WORDS_STACK 10240 /* pairs of kw, vw and pw: d = 64 and 128 keys take 8,704 */
#define SR ATTENTION_SR
#define QW 32 /* pairs of a query row (d <= 64) */

#ifdef HAVE_BF16_ATTENTION

/* 32 floats in order (lo: the first 16) as 16 BF16 pairs in order: pair i
 * holds elements 2i (low half) and 2i + 1. */
AVX512BF16_FN static inline __m512i pairs32(__m512 lo, __m512 hi)
{
    const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35,
                                         33, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3,
                                         1);
    return _mm512_permutex2var_epi16(bf16_round_high(lo), odd, bf16_round_high(hi));
}

/* Element i of a and of b as pair i (a's the low half). */
AVX512BF16_FN static inline __m512i interleave16(__m512 a, __m512 b)
{
    return _mm512_or_si512(_mm512_srli_epi32(bf16_round_high(a), 16),
                           _mm512_and_si512(bf16_round_high(b),
                                            _mm512_set1_epi32((int)0xffff0000u)));
}

/* n floats of x (n <= 32, the rest zero) as pairs into w[0 .. 16). */
AVX512BF16_FN static inline void store_pairs(uint32_t *w, const float *x, int n)
{
    __m512 lo, hi;
    if (n >= 32) {
        lo = _mm512_loadu_ps(x);
        hi = _mm512_loadu_ps(x + 16);
    } else {
        __mmask16 m0, m1;
        gemm_panel_masks(n, &m0, &m1);
        lo = _mm512_maskz_loadu_ps(m0, x);
        hi = _mm512_maskz_loadu_ps(m1, x + 16);
    }
    _mm512_storeu_si512(w, pairs32(lo, hi));
}

/* kw[i * lp + u] = the pair (k[u][2i], k[u][2i + 1]) for u < len, 0 for
 * len <= u < lp (lp a multiple of 16): each key's row as pairs, 16 keys
 * by 16 pairs transposed in registers. */
AVX512BF16_FN static void pack_keys(uint32_t *kw, const float *k, int ld, int len, int lp, int d)
{
    for (int u0 = 0; u0 < lp; u0 += 16) {
        int n = len - u0 < 16 ? len - u0 : 16;
        for (int i0 = 0; i0 < d; i0 += 32) {
            int nd = d - i0 < 32 ? d - i0 : 32;
            __m512 r[16];
            for (int u = 0; u < 16; u++) {
                if (u >= n) {
                    r[u] = _mm512_setzero_ps();
                    continue;
                }
                const float *x = k + (size_t)(u0 + u) * ld + i0;
                __m512 lo = _mm512_loadu_ps(x);
                __m512 hi = nd == 32 ? _mm512_loadu_ps(x + 16) : _mm512_setzero_ps();
                r[u] = _mm512_castsi512_ps(pairs32(lo, hi));
            }
            transpose16(r);
            for (int i = 0; i < nd / 2; i++)
                _mm512_storeu_si512(kw + (size_t)(i0 / 2 + i) * lp + u0, _mm512_castps_si512(r[i]));
        }
    }
}

/* vw[j * d + i] = the pair (v[2j][i], v[2j + 1][i]) for j < np, a key at
 * len or beyond zero. */
AVX512BF16_FN static void pack_values(uint32_t *vw, const float *v, int ld, int len, int np, int d)
{
    for (int j = 0; j < np; j++) {
        const float *a = v + (size_t)(2 * j) * ld, *b = a + ld;
        int has_b = 2 * j + 1 < len;
        for (int i = 0; i < d; i += 16)
            _mm512_storeu_si512(vw + (size_t)j * d + i,
                                interleave16(_mm512_loadu_ps(a + i),
                                             has_b ? _mm512_loadu_ps(b + i) : _mm512_setzero_ps()));
    }
}

/* Scores of the query rows qw (SR rows of QW pairs; rows <= SR real)
 * against keys u0 .. u0 + 16 NC - 1 (NC 1 or 2, a constant; those below
 * len stored) into att (row stride T); top[r] keeps row r's largest score
 * per lane. */
AVX512BF16_FN static inline __attribute__((always_inline)) void
score_tile(const int NC, float *att, int T, const uint32_t *qw, const uint32_t *kw, int lp,
           int pairs, int rows, int u0, int len, __m512 top[SR])
{
    __m512 acc[SR][2];
#pragma GCC unroll 8
    for (int r = 0; r < SR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const uint32_t *b = kw + u0;
    for (int i = 0; i < pairs; i++) {
        __m512bh k0 = (__m512bh)_mm512_loadu_si512(b + (size_t)i * lp);
        __m512bh k1 = NC == 2 ? (__m512bh)_mm512_loadu_si512(b + (size_t)i * lp + 16) : k0;
#pragma GCC unroll 8
        for (int r = 0; r < SR; r++) {
            __m512bh x = (__m512bh)_mm512_set1_epi32((int)qw[r * QW + i]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, k0);
            if (NC == 2) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, k1);
        }
    }
    attention_store_scores(NC, att, T, acc, rows, u0, len, top);
}

/* Scores of query rows q[0 .. rows) (rows <= SR; row stride ldq) against
 * keys 0 .. len - 1 into att (row stride T), and each row's largest score
 * in mx (a NaN score skipped). */
AVX512BF16_FN static void score_rows(float *att, int T, const float *q, int ldq, const uint32_t *kw,
                                     int lp, int d, int rows, int len, float mx[SR])
{
    _Alignas(64) uint32_t qw[SR * QW];
    __m512 top[SR];
    for (int r = 0; r < SR; r++) {
        const float *x = q + (size_t)(r < rows ? r : rows - 1) * ldq;
        for (int i0 = 0; i0 < d; i0 += 32) store_pairs(qw + r * QW + i0 / 2, x + i0, d - i0);
        top[r] = _mm512_set1_ps(-INFINITY);
    }
    int u0 = 0;
    for (; len - u0 > 16; u0 += 32) score_tile(2, att, T, qw, kw, lp, d / 2, rows, u0, len, top);
    if (u0 < len) score_tile(1, att, T, qw, kw, lp, d / 2, rows, u0, len, top);
#pragma GCC unroll 8
    for (int r = 0; r < SR; r++) mx[r] = _mm512_reduce_max_ps(top[r]);
}

/* out[r][0 .. 16 * DV) = sum over key pairs j < np of pw[r][j] . vw[j]
 * for rows r < rows (rows <= VR; pw row stride lw); DV and VR constants
 * once inlined. */
AVX512BF16_FN static inline __attribute__((always_inline)) void
value_tile(float *out, int ldo, const uint32_t *pw, int lw, const uint32_t *vw, int d, int np,
           int rows, const int DV, const int VR)
{
    __m512 acc[8][4];
    const uint32_t *pr[8];
#pragma GCC unroll 8
    for (int r = 0; r < VR; r++) {
        pr[r] = pw + (size_t)(r < rows ? r : rows - 1) * lw;
#pragma GCC unroll 4
        for (int j = 0; j < DV; j++) acc[r][j] = _mm512_setzero_ps();
    }
    for (int j = 0; j < np; j++) {
        const uint32_t *vj = vw + (size_t)j * d;
        __m512bh x[4];
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++) x[c] = (__m512bh)_mm512_loadu_si512(vj + 16 * c);
#pragma GCC unroll 8
        for (int r = 0; r < VR; r++) {
            __m512bh p = (__m512bh)_mm512_set1_epi32((int)pr[r][j]);
#pragma GCC unroll 4
            for (int c = 0; c < DV; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], p, x[c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < VR; r++) {
        __mmask16 live = r < rows ? 0xffff : 0;
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++)
            _mm512_mask_storeu_ps(out + (size_t)r * ldo + 16 * c, live, acc[r][c]);
    }
}

/* The output rows of rows (<= SR) query rows whose probabilities are att
 * (row stride T, len of them), rounded into pw (row stride lw) first. */
AVX512BF16_FN static void values(float *out, int ldo, const float *att, int T, uint32_t *pw, int lw,
                                 const uint32_t *vw, int len, int np, int rows, int d)
{
    for (int r = 0; r < rows; r++)
        for (int u0 = 0; u0 < len; u0 += 32)
            store_pairs(pw + (size_t)r * lw + u0 / 2, att + (size_t)r * T + u0, len - u0);
    if (d <= 32) {
        if (d == 16) value_tile(out, ldo, pw, lw, vw, d, np, rows, 1, 8);
        else value_tile(out, ldo, pw, lw, vw, d, np, rows, 2, 8);
        return;
    }
    for (int t = 0; t < rows; t += 4) {
        int n = rows - t < 4 ? rows - t : 4;
        float *o = out + (size_t)t * ldo;
        const uint32_t *p = pw + (size_t)t * lw;
        if (d == 48) value_tile(o, ldo, p, lw, vw, d, np, n, 3, 4);
        else value_tile(o, ldo, p, lw, vw, d, np, n, 4, 4);
    }
}

int cpu_attention_head_bf16_rows(float *out, int ldo, float *att, const float *q, const float *k,
                                 const float *v, int ldqkv, int len, int T, int d, float scale,
                                 int rows)
{
    _Alignas(64) uint32_t stack[WORDS_STACK];
    if (!cpu_has(CPU_AVX512F | CPU_AVX512BW_VL | CPU_AVX512_BF16) ||
        (d != 16 && d != 32 && d != 48 && d != 64) || len < 1 || rows < 1 || rows > len)
        return 0;
    int lp = (len + 15) & ~15, np = (len + 1) / 2, lw = (np + 15) & ~15;
    size_t nk = (size_t)(d / 2) * lp, nv = (size_t)np * d, need = nk + nv + (size_t)SR * lw;
    uint32_t *kw = need <= WORDS_STACK ? stack : malloc(need * sizeof *kw);
    if (!kw) return 0;
    uint32_t *vw = kw + nk, *pw = vw + nv;
    pack_keys(kw, k, ldqkv, len, lp, d);
    pack_values(vw, v, ldqkv, len, np, d);
    for (int t = 0; t < rows; t += SR) {
        int n = rows - t < SR ? rows - t : SR;
        float *a = att + (size_t)t * T;
        float mx[SR];
        score_rows(a, T, q + (size_t)t * ldqkv, ldqkv, kw, lp, d, n, len, mx);
        cpu_softmax_rows_max(a, n, len, T, scale, mx);
        values(out + (size_t)t * ldo, ldo, a, T, pw, lw, vw, len, np, n, d);
    }
    if (kw != stack) free(kw);
    return 1;
}

#else

int cpu_attention_head_bf16_rows(float *out, int ldo, float *att, const float *q, const float *k,
                                 const float *v, int ldqkv, int len, int T, int d, float scale,
                                 int rows)
{
    (void)out, (void)ldo, (void)att, (void)q, (void)k, (void)v, (void)ldqkv, (void)len, (void)T,
        (void)d, (void)scale, (void)rows;
    return 0;
}

#endif

int cpu_attention_head_bf16(float *out, int ldo, float *att, const float *q, const float *k,
                            const float *v, int ldqkv, int len, int T, int d, float scale)
{
    if (!cpu_attention_head_bf16_rows(out, ldo, att, q, k, v, ldqkv, len, T, d, scale, len))
        return 0;
    for (int t = len; t < T; t++) memset(out + (size_t)t * ldo, 0, (size_t)d * sizeof *out);
    return 1;
}
