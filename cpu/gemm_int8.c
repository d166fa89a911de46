/* gemm_int8.c: INT8 linear layers with 32-bit integer sums (see
 * gemm_int8.h).
 *
 * Owns the weight quantization and packed layout, the activation
 * quantization, the CPU check, the AVX512-VNNI kernel and its plain C twin
 * (the fall-back and the reference).
 *
 * The kernel (GotoBLAS shape, as gemm_bf16.c): the rows are cut into blocks
 * of equal height up to MC (a sequence's rows one block, so that each
 * weight is read once per product at batch 1); for each block the range of every row is found over all of K
 * (one pass), then K is cut into blocks of KC quads and each block of rows
 * is quantized to u8 quads into a stack buffer (row stride KC quads). For
 * each 32-column panel an MR x 32 tile of the output is kept in 2 x MR zmm
 * int32 accumulators while the quads of k stream by: per quad, two loads of
 * the panel (16 columns each) and for each row one broadcast of its quad
 * and two vpdpbusd. The int32 partial sums of a tile are parked in the
 * output (as int32 bits) between K blocks, so the sum stays exact; the last
 * block subtracts the zero-point correction, converts, scales and adds the
 * bias as it stores. Ragged columns are stored with masks; the tile is
 * compiled for every height 1 .. MR, so ragged rows are neither computed
 * nor read (e5-small, batch 1, one thread: 8% of the rows of a 100-token
 * sequence were a 12-row tile's zero padding). A tile fetches its output
 * lines into L1 (prefetcht0) before its products: where the output's row
 * stride is a multiple of 4 KiB (N = 1024, 2048, 3072: BERT-base's FFN)
 * all of a tile's rows share cache sets and address bits, and storing them
 * at the end cost 25% (3072 x 768 x 3072: 650 -> 900 GOP/s). The loop that
 * does it sits in each kernel's tile: gcc drops a function made only of
 * prefetches (it has no side effects), and with it the prefetches. The
 * next panel is prefetched into L2 while a panel's tiles run (e5-small,
 * batch 1: 137 -> 159 sequences/s, its weights come from L3).
 */
#include "cpu/gemm_int8.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "cpu/features.h"
#include "cpu/gemm_common.h"

#define PANEL GEMM_INT8_PANEL
#define MR 12  /* rows of the register tile */
#define KC 192 /* quads of k per block (768 k) */
#define MC 96  /* rows per block at most (a multiple of MR) */

#define AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

typedef int v16si __attribute__((vector_size(64)));

/* ---- the CPU check ------------------------------------------------------- */

int gemm_int8_supported(void)
{
    return cpu_has(CPU_AVX512F | CPU_AVX512BW_VL | CPU_AVX512_VNNI);
}

/* ---- weights ------------------------------------------------------------- */

/* Offset of qw[n][k] in the packed data. */
static size_t packed_index(const gemm_int8_weight *w, int n, int k)
{
    int j = n / PANEL, c = n % PANEL;
    return (((size_t)j * w->quads + (size_t)(k / 4)) * PANEL + c) * 4 + (k & 3);
}

int gemm_int8_pack(const float *W, int N, int K, gemm_int8_weight **out, char *err)
{
    *out = NULL;
    if (N < 1 || K < 1 || N > (1 << 24) || K > GEMM_INT8_MAX_K)
        return sm_error(err, SM_ERR_INVALID,
                        "int8 weight: shape (%d, %d) is out of range "
                        "(K at most %d)",
                        N, K, GEMM_INT8_MAX_K);
    for (size_t i = 0; i < (size_t)N * K; i++)
        if (!isfinite(W[i]))
            return sm_error(err, SM_ERR_INVALID, "int8 weight: W[%zu][%zu] is not finite",
                            i / (size_t)K, i % (size_t)K);
    gemm_int8_weight *w = calloc(1, sizeof *w);
    if (!w) return sm_error(err, SM_ERR_NOMEM, "out of memory packing an int8 weight");
    w->N = N;
    w->K = K;
    w->quads = (K + 3) / 4;
    w->panels = (N + PANEL - 1) / PANEL;
    size_t cols = (size_t)w->panels * PANEL;
    size_t bytes;
    w->data = gemm_packed_alloc(cols * w->quads * 4, sizeof *w->data, &bytes);
    w->wscale = calloc(cols, sizeof *w->wscale);
    w->colsum = calloc(cols, sizeof *w->colsum);
    if (!w->data || !w->wscale || !w->colsum) {
        gemm_int8_free(w);
        return sm_error(err, SM_ERR_NOMEM, "out of memory: a (%d, %d) int8 weight needs %zu KiB", N,
                        K, bytes >> 10);
    }
    for (int n = 0; n < N; n++) {
        const float *row = W + (size_t)n * K;
        float amax = 0.0f;
        for (int k = 0; k < K; k++) amax = fabsf(row[k]) > amax ? fabsf(row[k]) : amax;
        if (amax == 0.0f) continue; /* scale 0, all q 0 */
        float inv = 127.0f / amax;
        int32_t sum = 0;
        for (int k = 0; k < K; k++) {
            int q = (int)nearbyintf(row[k] * inv);
            q = q < -127 ? -127 : q > 127 ? 127 : q;
            w->data[packed_index(w, n, k)] = (int8_t)q;
            sum += q;
        }
        w->wscale[n] = amax / 127.0f;
        w->colsum[n] = sum;
    }
    *out = w;
    return SM_OK;
}

void gemm_int8_free(gemm_int8_weight *w)
{
    if (!w) return;
    free(w->data);
    free(w->wscale);
    free(w->colsum);
    free(w);
}

int gemm_int8_unpack(const gemm_int8_weight *w, int n, int k)
{
    return w->data[packed_index(w, n, k)];
}

/* ---- activations --------------------------------------------------------- */

/* A row's quantization: qx = clamp(round(x * inv) + zero, 0, 255). */
typedef struct row_quant {
    float xscale, inv;
    int zero;
} row_quant;

/* The parameters of a row from lo = min(0, min x), hi = max(0, max x) and
 * whether every value is finite. */
static row_quant row_params(float lo, float hi, int finite)
{
    row_quant q = {0.0f, 0.0f, 0};
    float range = hi - lo;
    if (!finite || !(range <= FLT_MAX)) {
        q.xscale = NAN;
        return q;
    }
    if (range == 0.0f || !(255.0f / range <= FLT_MAX)) return q; /* zero (or denormal) row */
    q.xscale = range / 255.0f;
    q.inv = 255.0f / range;
    q.zero = (int)nearbyintf(-lo * q.inv);
    return q;
}

static row_quant row_quant_scalar(const float *x, int K)
{
    float lo = 0.0f, hi = 0.0f;
    int finite = 1;
    for (int k = 0; k < K; k++) {
        if (!isfinite(x[k])) finite = 0;
        else if (x[k] < lo) lo = x[k];
        else if (x[k] > hi) hi = x[k];
    }
    return row_params(lo, hi, finite);
}

static uint8_t quantize(float x, row_quant q)
{
    if (q.inv == 0.0f) return 0; /* zero and non-finite rows */
    int v = (int)nearbyintf(x * q.inv) + q.zero;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

void gemm_int8_quantize_row(const float *x, int K, uint8_t *q, float *xscale, int *zero)
{
    row_quant rq = row_quant_scalar(x, K);
    *xscale = rq.xscale;
    *zero = rq.zero;
    if (q)
        for (int k = 0; k < K; k++) q[k] = quantize(x[k], rq);
}

/* ---- plain C ------------------------------------------------------------- */

void gemm_int8_linear_scalar(float *out, const float *in, const gemm_int8_weight *w,
                             const float *bias, int R, int col_lo, int col_hi)
{
    uint8_t q[GEMM_INT8_MAX_K];
    int K = w->K, N = w->N;
    if (col_hi > N) col_hi = N;
    for (int r = 0; r < R; r++) {
        const float *x = in + (size_t)r * K;
        row_quant rq = row_quant_scalar(x, K);
        for (int k = 0; k < K; k++) q[k] = quantize(x[k], rq);
        for (int n = col_lo; n < col_hi; n++) {
            const int8_t *b = w->data + packed_index(w, n, 0);
            int32_t acc = 0;
            for (int k = 0; k < K; k++) acc += (int32_t)q[k] * b[(k / 4) * 4 * PANEL + (k & 3)];
            float v = (float)(acc - rq.zero * w->colsum[n]);
            out[(size_t)r * N + n] = fmaf(v, rq.xscale * w->wscale[n], bias ? bias[n] : 0.0f);
        }
    }
}

/* ---- AVX512-VNNI --------------------------------------------------------- */

/* row_quant_scalar with vectors: the same lo, hi and finiteness (min and
 * max are exact; x * 0 is NaN exactly for an infinity or NaN). */
AVX512VNNI static row_quant row_quant_avx512(const float *x, int K)
{
    __m512 lo = _mm512_setzero_ps(), hi = lo, chk = lo, zero = lo;
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 v = _mm512_loadu_ps(x + k);
        lo = _mm512_min_ps(lo, v);
        hi = _mm512_max_ps(hi, v);
        chk = _mm512_add_ps(chk, _mm512_mul_ps(v, zero));
    }
    if (k < K) {
        __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << (K - k)) - 1), x + k);
        lo = _mm512_min_ps(lo, v);
        hi = _mm512_max_ps(hi, v);
        chk = _mm512_add_ps(chk, _mm512_mul_ps(v, zero));
    }
    return row_params(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi),
                      _mm512_reduce_add_ps(chk) == 0.0f);
}

/* quantize() of 16 values. */
AVX512VNNI static inline __m128i quantize16(__m512 x, __m512 inv, __m512i zero)
{
    __m512i v = _mm512_cvt_roundps_epi32(_mm512_mul_ps(x, inv),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_add_epi32(v, zero);
    v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_setzero_si512()), _mm512_set1_epi32(255));
    return _mm512_cvtepi32_epi8(v);
}

/* Quantizes rows [0, rows) of in (stride K), quads [p0, p0 + np), into a
 * (row stride KC quads); past K the buffer is zero (the padded weights
 * are zero too). */
AVX512VNNI static void pack_rows(uint32_t *a, const float *in, int K, int rows, int p0, int np,
                                 const row_quant *rq)
{
    int k0 = 4 * p0, nk = 4 * np < K - k0 ? 4 * np : K - k0;
    for (int i = 0; i < rows; i++) {
        const float *x = in + (size_t)i * K + k0;
        uint8_t *dst = (uint8_t *)(a + (size_t)i * KC);
        __m512 inv = _mm512_set1_ps(rq[i].inv);
        __m512i zero = _mm512_set1_epi32(rq[i].inv == 0.0f ? 0 : rq[i].zero);
        int k = 0;
        for (; k + 16 <= nk; k += 16)
            _mm_storeu_si128((__m128i *)(dst + k), quantize16(_mm512_loadu_ps(x + k), inv, zero));
        if (k < nk) {
            __mmask16 m = (__mmask16)((1u << (nk - k)) - 1);
            __m128i q = quantize16(_mm512_maskz_loadu_ps(m, x + k), inv, zero);
            _mm_mask_storeu_epi8(dst + k, m, q);
        }
        memset(dst + nk, 0, (size_t)(4 * np - nk));
    }
}

/* Stores one row of a tile: v0, v1 are the int32 sums of 32 columns
 * (masked by m0, m1) starting at column n0. Not first: the int32 sums parked
 * in o are added. Not last: the sums are parked in o; last: written as
 * floats with the row and column scales, the zero-point correction and the
 * bias row c0, c1. */
AVX512VNNI static inline void store_row(float *o, __m512i v0, __m512i v1, __mmask16 m0,
                                        __mmask16 m1, row_quant rq, const gemm_int8_weight *w,
                                        int n0, __m512 c0, __m512 c1, int first, int last)
{
    if (!first) {
        v0 = _mm512_add_epi32(v0, _mm512_maskz_loadu_epi32(m0, o));
        v1 = _mm512_add_epi32(v1, _mm512_maskz_loadu_epi32(m1, o + 16));
    }
    if (!last) {
        _mm512_mask_storeu_epi32(o, m0, v0);
        _mm512_mask_storeu_epi32(o + 16, m1, v1);
        return;
    }
    __m512i zp = _mm512_set1_epi32(rq.zero);
    __m512 xs = _mm512_set1_ps(rq.xscale);
    v0 = _mm512_sub_epi32(v0, _mm512_mullo_epi32(zp, _mm512_loadu_si512(w->colsum + n0)));
    v1 = _mm512_sub_epi32(v1, _mm512_mullo_epi32(zp, _mm512_loadu_si512(w->colsum + n0 + 16)));
    __m512 s0 = _mm512_mul_ps(xs, _mm512_loadu_ps(w->wscale + n0));
    __m512 s1 = _mm512_mul_ps(xs, _mm512_loadu_ps(w->wscale + n0 + 16));
    _mm512_mask_storeu_ps(o, m0, _mm512_fmadd_ps(_mm512_cvtepi32_ps(v0), s0, c0));
    _mm512_mask_storeu_ps(o + 16, m1, _mm512_fmadd_ps(_mm512_cvtepi32_ps(v1), s1, c1));
}

/* acc[i] += the products of row i of a (stride KC quads) and a panel's K
 * block b over np quads, for i < rows; PF (a constant, 0 1 or 2) cache
 * lines from pf prefetched into L2 per quad. */
AVX512VNNI static inline __attribute__((always_inline)) void quads(const int rows, v16si acc[MR][2],
                                                                   int np, const uint32_t *a,
                                                                   const int8_t *b, const char *pf,
                                                                   const int PF)
{
    for (int p = 0; p < np; p++, b += 4 * PANEL) {
        if (PF >= 1) _mm_prefetch(pf, _MM_HINT_T1);
        if (PF == 2) _mm_prefetch(pf + 64, _MM_HINT_T1);
        pf += 64 * PF;
        v16si b0 = (v16si)_mm512_load_si512(b);
        v16si b1 = (v16si)_mm512_load_si512(b + 4 * 16);
#pragma GCC unroll 16
        for (int i = 0; i < rows; i++) {
            v16si x = (v16si)_mm512_set1_epi32((int)a[(size_t)i * KC + p]);
            acc[i][0] = (v16si)_mm512_dpbusd_epi32((__m512i)acc[i][0], (__m512i)x, (__m512i)b0);
            acc[i][1] = (v16si)_mm512_dpbusd_epi32((__m512i)acc[i][1], (__m512i)x, (__m512i)b1);
        }
    }
}

/* The out tile (rows, a compile-time constant <= MR, of 32 columns masked
 * by m0, m1, starting at column n0) of a row tile a (stride KC quads) times
 * a panel's K block b (np quads), stored by store_row; bias may be NULL.
 * pf (may be NULL): np * pf_step cache lines from there are prefetched
 * into L2, pf_step (1 or 2) per quad, while the products run. */
AVX512VNNI static inline __attribute__((always_inline)) void
tile(const int rows, int np, const uint32_t *a, const int8_t *b, float *out, int ldo, __mmask16 m0,
     __mmask16 m1, const row_quant *rq, const gemm_int8_weight *w, int n0, const float *bias,
     int first, int last, const char *pf, int pf_step)
{
    /* int32 lanes (GCC's __m512i is 8 x int64: with it the accumulators
     * are copied and spilled on every quad) */
    v16si acc[MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < rows; i++) {
        acc[i][0] = acc[i][1] = (v16si){0};
        _mm_prefetch((const char *)(out + (size_t)i * ldo), _MM_HINT_T0);
        _mm_prefetch((const char *)(out + (size_t)i * ldo + 16), _MM_HINT_T0);
    }
    if (!pf) quads(rows, acc, np, a, b, pf, 0);
    else if (pf_step == 1) quads(rows, acc, np, a, b, pf, 1);
    else quads(rows, acc, np, a, b, pf, 2);
    __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
    if (bias) {
        c0 = _mm512_maskz_loadu_ps(m0, bias + n0);
        c1 = _mm512_maskz_loadu_ps(m1, bias + n0 + 16);
    }
#pragma GCC unroll 16
    for (int i = 0; i < rows; i++)
        store_row(out + (size_t)i * ldo, (__m512i)acc[i][0], (__m512i)acc[i][1], m0, m1, rq[i], w,
                  n0, c0, c1, first, last);
}

typedef void (*tile_fn)(int np, const uint32_t *a, const int8_t *b, float *out, int ldo,
                        __mmask16 m0, __mmask16 m1, const row_quant *rq, const gemm_int8_weight *w,
                        int n0, const float *bias, int first, int last, const char *pf,
                        int pf_step);

#define TILE(n)                                                                               \
    __attribute__((noinline))                                                                 \
    AVX512VNNI static void tile_##n(int np, const uint32_t *a, const int8_t *b, float *out,   \
                                    int ldo, __mmask16 m0, __mmask16 m1, const row_quant *rq, \
                                    const gemm_int8_weight *w, int n0, const float *bias,     \
                                    int first, int last, const char *pf, int pf_step)         \
    {                                                                                         \
        tile(n, np, a, b, out, ldo, m0, m1, rq, w, n0, bias, first, last, pf, pf_step);       \
    }
GEMM_TILES_1_TO_12(tile_fn)
_Static_assert(MR == 12, "k_tiles holds the tiles of 1 .. 12 rows");
#undef TILE

/* Rows per block for R rows: blocks of equal height, a multiple of MR up
 * to MC, so that a sequence's rows (up to MC) are one block and each
 * weight panel is read once per product. */
static int row_block(int R)
{
    int blocks = (R + MC - 1) / MC;
    int rows = (R + blocks - 1) / blocks;
    return (rows + MR - 1) / MR * MR;
}

AVX512VNNI static void linear_avx512(float *out, const float *in, const gemm_int8_weight *w,
                                     const float *bias, int R, int col_lo, int col_hi)
{
    _Alignas(64) uint32_t a[MC * KC];
    row_quant rq[MC];
    int K = w->K, N = w->N, j_lo = col_lo / PANEL, j_hi = (col_hi + PANEL - 1) / PANEL;
    int mc = row_block(R);
    for (int r0 = 0; r0 < R; r0 += mc) {
        int mr = R - r0 < mc ? R - r0 : mc;
        for (int i = 0; i < mr; i++) rq[i] = row_quant_avx512(in + (size_t)(r0 + i) * K, K);
        for (int p0 = 0; p0 < w->quads; p0 += KC) {
            int np = w->quads - p0 < KC ? w->quads - p0 : KC;
            pack_rows(a, in + (size_t)r0 * K, K, mr, p0, np, rq);
            for (int j = j_lo; j < j_hi; j++) {
                const int8_t *b = w->data + ((size_t)j * w->quads + p0) * 4 * PANEL;
                int n0 = j * PANEL, cols = (col_hi < N ? col_hi : N) - n0;
                if (cols > PANEL) cols = PANEL;
                __mmask16 m0, m1;
                gemm_panel_masks(cols, &m0, &m1);
                /* The next panel's K block (2 cache lines per quad) is
                 * fetched into L2 by the first tiles while this one's run:
                 * one tile fetches all of it, or two tiles half each. */
                const char *next = j + 1 < j_hi ? (const char *)(b + (size_t)w->quads * 4 * PANEL)
                                                : NULL;
                int tiles = (mr + MR - 1) / MR;
                for (int t = 0; t < tiles; t++) {
                    int i = t * MR;
                    const char *pf = NULL;
                    int pf_step = 1;
                    if (next && tiles == 1) pf = next, pf_step = 2;
                    else if (next && t < 2) pf = next + (size_t)t * np * 64;
                    k_tiles[mr - i < MR ? mr - i : MR](np, a + (size_t)i * KC, b,
                                                       out + (size_t)(r0 + i) * N + n0, N, m0, m1,
                                                       rq + i, w, n0, bias, p0 == 0,
                                                       p0 + np == w->quads, pf, pf_step);
                }
            }
        }
    }
}

/* ---- entry points (gemm_common.h) ---------------------------------------- */

GEMM_ENTRY_POINTS(int8)
