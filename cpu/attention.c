/* attention.c: one (sequence, head) of inference attention with AVX-512F
 * (attention.h).
 *
 * Two OpenBLAS calls per (sequence, head) spent more time on packing,
 * clearing and call overhead than on the products at the encoders' small
 * head sizes (the built-in shape: d = 32, about 80 rows): 39% of its INT8
 * encoder's cycles at batch 32. Here, with the operands in place:
 *
 * - scores: the keys are copied once, transposed 16 x 16 in registers (kt[i][u],
 *   rows padded with zeros to a multiple of 16 keys, on the stack up to
 *   KEYS_STACK floats), and an SR x 32 tile of scores (SR x 16 for the last
 *   16 keys or fewer) is kept in 2 x SR zmm
 *   accumulators while i runs over d: per i two loads of kt and for each
 *   query row one broadcast of q[r][i] and two FMAs. Each score is one FMA
 *   chain in i order. Ragged keys are stored with masks; ragged query rows
 *   reuse the last row and are not stored.
 * - the masked row softmax of softmax.h, the same as before, given the
 *   rows' largest scores, which the score tiles keep as they go;
 * - values: a VR x d tile of the output in VR x d/16 accumulators while u
 *   runs over the keys: per u, d/16 loads of v[u] and for each row one
 *   broadcast of p[r][u] and d/16 FMAs; d is 16, 32, 48 or 64, a constant
 *   in each of the four compiled tiles, and VR 8 rows for d up to 32, 4
 *   above (accumulators and loads within the 32 registers).
 * The three steps run per block of SR query rows, so that the block's
 * scores (SR x len floats) are still in L1 when the softmax and the values
 * read them; a head's whole len x len matrix would not be.
 *
 * Owns nothing past a call (the keys' copy is on the stack or freed).
 */
#include "cpu/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/features.h"
#include "cpu/gemm_common.h"
#include "cpu/softmax.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512_ATTENTION 1
#define AVX512F_FN __attribute__((target("avx512f")))
#include "cpu/attention_simd.h"
#endif

#define KEYS_STACK 8192 /* floats: d x padded keys up to 64 x 128 */
#define SR ATTENTION_SR

#ifdef HAVE_AVX512_ATTENTION

/* Rows u0 .. u0 + 15 of k, columns i0 .. i0 + 15, transposed into kt
 * (row stride lp); rows n .. 15 (n <= 16; n = 16 a constant in the loop
 * over whole blocks) are zeros and not read. */
AVX512F_FN static inline __attribute__((always_inline)) void
pack_block(float *kt, int lp, const float *k, int ld, int u0, int i0, int n)
{
    __m512 r[16];
    const float *k0 = k + (size_t)u0 * ld + i0;
#pragma GCC unroll 16
    for (int u = 0; u < 16; u++)
        r[u] = u < n ? _mm512_loadu_ps(k0 + (size_t)u * ld) : _mm512_setzero_ps();
    transpose16(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(kt + (size_t)(i0 + i) * lp + u0, r[i]);
}

/* kt[i * lp + u] = k[u][i] for u < len, 0 for len <= u < lp (lp a
 * multiple of 16, d of 16): 16 x 16 blocks transposed in registers. */
AVX512F_FN static void pack_keys(float *kt, const float *k, int ld, int len, int lp, int d)
{
    int u0 = 0;
    for (; u0 + 16 <= len; u0 += 16)
        for (int i0 = 0; i0 < d; i0 += 16) pack_block(kt, lp, k, ld, u0, i0, 16);
    for (; u0 < lp; u0 += 16) {
        int n = len - u0 < 0 ? 0 : len - u0;
        for (int i0 = 0; i0 < d; i0 += 16) pack_block(kt, lp, k, ld, u0, i0, n);
    }
}

/* Scores of the query rows qr (rows <= SR of them real) against keys u0
 * .. u0 + 16 NC - 1 (NC 1 or 2, a constant; those below len stored) into
 * att (row stride T); top[r] keeps row r's largest score per lane. */
AVX512F_FN static inline __attribute__((always_inline)) void
score_tile(const int NC, float *att, int T, const float *const qr[SR], const float *kt, int lp,
           int d, int rows, int u0, int len, __m512 top[SR])
{
    __m512 acc[SR][2];
#pragma GCC unroll 8
    for (int r = 0; r < SR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const float *b = kt + u0;
    for (int i = 0; i < d; i++) {
        __m512 k0 = _mm512_loadu_ps(b + (size_t)i * lp);
        __m512 k1 = NC == 2 ? _mm512_loadu_ps(b + (size_t)i * lp + 16) : k0;
#pragma GCC unroll 8
        for (int r = 0; r < SR; r++) {
            __m512 x = _mm512_set1_ps(qr[r][i]);
            acc[r][0] = _mm512_fmadd_ps(x, k0, acc[r][0]);
            if (NC == 2) acc[r][1] = _mm512_fmadd_ps(x, k1, acc[r][1]);
        }
    }
    attention_store_scores(NC, att, T, acc, rows, u0, len, top);
}

/* Scores of query rows q[0 .. rows) (rows <= SR; row stride ldq) against
 * keys 0 .. len - 1 into att (row stride T), 32 keys a tile (16 for the
 * last where no more are left), and each row's largest score in mx (a NaN
 * score skipped, as the softmax's own max does). */
AVX512F_FN static void score_rows(float *att, int T, const float *q, int ldq, const float *kt,
                                  int lp, int d, int rows, int len, float mx[SR])
{
    __m512 top[SR];
    const float *qr[SR];
#pragma GCC unroll 8
    for (int r = 0; r < SR; r++) {
        qr[r] = q + (size_t)(r < rows ? r : rows - 1) * ldq;
        top[r] = _mm512_set1_ps(-INFINITY);
    }
    int u0 = 0;
    for (; len - u0 > 16; u0 += 32) score_tile(2, att, T, qr, kt, lp, d, rows, u0, len, top);
    if (u0 < len) score_tile(1, att, T, qr, kt, lp, d, rows, u0, len, top);
#pragma GCC unroll 8
    for (int r = 0; r < SR; r++) mx[r] = _mm512_reduce_max_ps(top[r]);
}

/* out[r][0 .. 16 * DV) = sum over u < len of p[r][u] * v[u] for rows
 * r < rows (rows <= VR); DV and VR constants once inlined. */
AVX512F_FN static inline __attribute__((always_inline)) void
value_tile(float *out, int ldo, const float *p, int T, const float *v, int ldv, int len, int rows,
           const int DV, const int VR)
{
    __m512 acc[8][4];
    const float *pr[8];
#pragma GCC unroll 8
    for (int r = 0; r < VR; r++) {
        pr[r] = p + (size_t)(r < rows ? r : rows - 1) * T;
#pragma GCC unroll 4
        for (int j = 0; j < DV; j++) acc[r][j] = _mm512_setzero_ps();
    }
    for (int u = 0; u < len; u++) {
        const float *vu = v + (size_t)u * ldv;
        __m512 x[4];
#pragma GCC unroll 4
        for (int j = 0; j < DV; j++) x[j] = _mm512_loadu_ps(vu + 16 * j);
#pragma GCC unroll 8
        for (int r = 0; r < VR; r++) {
            __m512 w = _mm512_set1_ps(pr[r][u]);
#pragma GCC unroll 4
            for (int j = 0; j < DV; j++) acc[r][j] = _mm512_fmadd_ps(w, x[j], acc[r][j]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < VR; r++) {
        __mmask16 live = r < rows ? 0xffff : 0;
#pragma GCC unroll 4
        for (int j = 0; j < DV; j++)
            _mm512_mask_storeu_ps(out + (size_t)r * ldo + 16 * j, live, acc[r][j]);
    }
}

/* The output rows of rows (<= SR) query rows whose probabilities are att
 * (row stride T). */
AVX512F_FN static void values(float *out, int ldo, const float *att, int T, const float *v, int ldv,
                              int len, int rows, int d)
{
    if (d <= 32) {
        if (d == 16) value_tile(out, ldo, att, T, v, ldv, len, rows, 1, 8);
        else value_tile(out, ldo, att, T, v, ldv, len, rows, 2, 8);
        return;
    }
    for (int t = 0; t < rows; t += 4) {
        int n = rows - t < 4 ? rows - t : 4;
        float *o = out + (size_t)t * ldo;
        const float *p = att + (size_t)t * T;
        if (d == 48) value_tile(o, ldo, p, T, v, ldv, len, n, 3, 4);
        else value_tile(o, ldo, p, T, v, ldv, len, n, 4, 4);
    }
}

int cpu_attention_head_rows(float *out, int ldo, float *att, const float *q, const float *k,
                            const float *v, int ldqkv, int len, int T, int d, float scale, int rows)
{
    float stack[KEYS_STACK];
    int lp = (len + 15) & ~15;
    size_t need = (size_t)d * lp;

    if (!cpu_has(CPU_AVX512F) || (d != 16 && d != 32 && d != 48 && d != 64) || len < 1 ||
        rows < 1 || rows > len)
        return 0;
    float *kt = need <= KEYS_STACK ? stack : malloc(need * sizeof *kt);
    if (!kt) return 0;
    pack_keys(kt, k, ldqkv, len, lp, d);
    for (int t = 0; t < rows; t += SR) {
        int n = rows - t < SR ? rows - t : SR;
        float *a = att + (size_t)t * T;
        float mx[SR];
        score_rows(a, T, q + (size_t)t * ldqkv, ldqkv, kt, lp, d, n, len, mx);
        cpu_softmax_rows_max(a, n, len, T, scale, mx);
        values(out + (size_t)t * ldo, ldo, a, T, v, ldqkv, len, n, d);
    }
    if (kt != stack) free(kt);
    return 1;
}

#else

int cpu_attention_head_rows(float *out, int ldo, float *att, const float *q, const float *k,
                            const float *v, int ldqkv, int len, int T, int d, float scale, int rows)
{
    (void)out, (void)ldo, (void)att, (void)q, (void)k, (void)v, (void)ldqkv, (void)len, (void)T,
        (void)d, (void)scale, (void)rows;
    return 0;
}

#endif

int cpu_attention_head(float *out, int ldo, float *att, const float *q, const float *k,
                       const float *v, int ldqkv, int len, int T, int d, float scale)
{
    if (!cpu_attention_head_rows(out, ldo, att, q, k, v, ldqkv, len, T, d, scale, len)) return 0;
    for (int t = len; t < T; t++) memset(out + (size_t)t * ldo, 0, (size_t)d * sizeof *out);
    return 1;
}
