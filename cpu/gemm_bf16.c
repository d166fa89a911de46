/* gemm_bf16.c: BF16 linear layers with FP32 accumulation (see gemm_bf16.h).
 *
 * Owns the packed-weight layout, the CPU check, the AVX512-BF16 kernel and
 * its plain C twins (the fall-back and the reference).
 *
 * The kernel (GotoBLAS shape): K is cut into blocks of KC pairs and the rows
 * into blocks of MC; each block of input rows is rounded to BF16 pairs into
 * a stack buffer (row stride KC pairs), then for each 32-column panel an
 * MR x 32 tile of the output is kept in 2 x MR zmm accumulators while the
 * pairs of k stream by: per pair, two loads of the panel (16 columns each)
 * and for each row one broadcast of its pair and two vdpbf16ps. A panel's
 * K block (KC x 128 bytes) stays in L1 across the row tiles of a block.
 * The first K block adds the bias as it stores, later ones add to the
 * output; ragged columns are stored with masks, ragged rows are computed
 * on zero rows and not stored.
 */
#include "cpu/gemm_bf16.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "cpu/features.h"
#include "cpu/bf16_round.h"
#include "cpu/gemm_common.h"

#define PANEL GEMM_BF16_PANEL
#define MR 12  /* rows of the register tile */
#define KC 192 /* pairs of k per block */
#define MC 96  /* rows per block (a multiple of MR) */

#define AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* ---- the CPU check ------------------------------------------------------- */

int gemm_bf16_supported(void)
{
    return cpu_has(CPU_AVX512F | CPU_AVX512BW_VL | CPU_AVX512_BF16);
}

/* ---- rounding ------------------------------------------------------------ */

uint16_t gemm_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u | 0x400000u) >> 16); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float gemm_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- packing ------------------------------------------------------------- */

/* Index of W[n][k] in the packed data. */
static size_t packed_index(const gemm_bf16_weight *w, int n, int k)
{
    int j = n / PANEL, c = n % PANEL;
    return (((size_t)j * w->pairs + (size_t)(k / 2)) * PANEL + c) * 2 + (k & 1);
}

int gemm_bf16_pack(const float *W, int N, int K, gemm_bf16_weight **out, char *err)
{
    *out = NULL;
    if (N < 1 || K < 1 || N > (1 << 24) || K > (1 << 24))
        return sm_error(err, SM_ERR_INVALID, "bf16 weight: shape (%d, %d) is out of range", N, K);
    gemm_bf16_weight *w = calloc(1, sizeof *w);
    if (!w) return sm_error(err, SM_ERR_NOMEM, "out of memory packing a bf16 weight");
    w->N = N;
    w->K = K;
    w->pairs = (K + 1) / 2;
    w->panels = (N + PANEL - 1) / PANEL;
    size_t bytes;
    w->data = gemm_packed_alloc((size_t)w->panels * w->pairs * 2 * PANEL, sizeof *w->data, &bytes);
    if (!w->data) {
        free(w);
        return sm_error(err, SM_ERR_NOMEM, "out of memory: a (%d, %d) bf16 weight needs %zu KiB", N,
                        K, bytes >> 10);
    }
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            w->data[packed_index(w, n, k)] = gemm_bf16_round(W[(size_t)n * K + k]);
    *out = w;
    return SM_OK;
}

void gemm_bf16_free(gemm_bf16_weight *w)
{
    if (!w) return;
    free(w->data);
    free(w);
}

float gemm_bf16_unpack(const gemm_bf16_weight *w, int n, int k)
{
    return gemm_bf16_to_float(w->data[packed_index(w, n, k)]);
}

/* ---- plain C ------------------------------------------------------------- */

/* The sum vdpbf16ps forms for one column: per pair, odd k then even k. */
void gemm_bf16_linear_scalar(float *out, const float *in, const gemm_bf16_weight *w,
                             const float *bias, int R, int col_lo, int col_hi)
{
    int K = w->K, N = w->N;
    if (col_hi > N) col_hi = N;
    for (int r = 0; r < R; r++) {
        const float *x = in + (size_t)r * K;
        for (int n = col_lo; n < col_hi; n++) {
            const uint16_t *b = w->data + packed_index(w, n, 0);
            float acc = 0.0f;
            for (int p = 0; p < w->pairs; p++, b += 2 * PANEL) {
                float x0 = gemm_bf16_to_float(gemm_bf16_round(x[2 * p]));
                float x1 = 2 * p + 1 < K ? gemm_bf16_to_float(gemm_bf16_round(x[2 * p + 1])) : 0.0f;
                acc += x1 * gemm_bf16_to_float(b[1]);
                acc += x0 * gemm_bf16_to_float(b[0]);
            }
            out[(size_t)r * N + n] = acc + (bias ? bias[n] : 0.0f);
        }
    }
}

void gemm_bf16_ref(float *out, const float *in, const float *W, const float *bias, int R, int K,
                   int N)
{
    for (int r = 0; r < R; r++)
        for (int n = 0; n < N; n++) {
            const float *x = in + (size_t)r * K, *wn = W + (size_t)n * K;
            float acc = 0.0f;
            for (int k = 0; k < K; k += 2) {
                float x0 = gemm_bf16_to_float(gemm_bf16_round(x[k]));
                float w0 = gemm_bf16_to_float(gemm_bf16_round(wn[k]));
                if (k + 1 < K)
                    acc += gemm_bf16_to_float(gemm_bf16_round(x[k + 1])) *
                           gemm_bf16_to_float(gemm_bf16_round(wn[k + 1]));
                acc += x0 * w0;
            }
            out[(size_t)r * N + n] = acc + (bias ? bias[n] : 0.0f);
        }
}

/* ---- AVX512-BF16 --------------------------------------------------------- */

/* 16 floats to 16 BF16 (the rounding of gemm_bf16_round). */
AVX512BF16 static inline __m256i round16(__m512 x)
{
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_round_high(x), 16));
}

/* Rounds rows [0, rows) of in (stride K), pairs [p0, p0 + np), into a
 * (row stride KC pairs); rows up to the next multiple of MR are zero. */
AVX512BF16 static void pack_rows(uint32_t *a, const float *in, int K, int rows, int p0, int np)
{
    int k0 = 2 * p0, nk = 2 * np < K - k0 ? 2 * np : K - k0;
    for (int i = 0; i < rows; i++) {
        const float *x = in + (size_t)i * K + k0;
        uint16_t *dst = (uint16_t *)(a + (size_t)i * KC);
        int k = 0;
        for (; k + 16 <= nk; k += 16)
            _mm256_storeu_si256((__m256i *)(dst + k), round16(_mm512_loadu_ps(x + k)));
        if (k < 2 * np) { /* the tail: zeros past K (the buffer row has room) */
            __mmask16 m = k < nk ? (__mmask16)((1u << (nk - k)) - 1) : 0;
            _mm256_storeu_si256((__m256i *)(dst + k), round16(_mm512_maskz_loadu_ps(m, x + k)));
        }
    }
    for (int i = rows; i % MR; i++) memset(a + (size_t)i * KC, 0, (size_t)np * sizeof *a);
}

/* out tile (rows <= MR, 32 columns masked by m0, m1) of a row tile a
 * (stride KC) times a panel's K block b (np pairs). first: the tile is
 * written with bias (may be NULL), else added to. */
AVX512BF16 static void kernel(int np, const uint32_t *a, const uint16_t *b, float *out, int ldo,
                              int rows, __mmask16 m0, __mmask16 m1, const float *bias, int first)
{
    __m512 acc[MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    /* the output lines fetched into L1 now (see gemm_int8.c) */
    for (int i = 0; i < rows; i++) {
        _mm_prefetch((const char *)(out + (size_t)i * ldo), _MM_HINT_T0);
        _mm_prefetch((const char *)(out + (size_t)i * ldo + 16), _MM_HINT_T0);
    }
    for (int p = 0; p < np; p++, b += 2 * PANEL) {
        __m512bh b0 = (__m512bh)_mm512_load_si512(b);
        __m512bh b1 = (__m512bh)_mm512_load_si512(b + PANEL);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            __m512bh x = (__m512bh)_mm512_set1_epi32((int)a[(size_t)i * KC + p]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, b1);
        }
    }
    __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
    if (first && bias) {
        c0 = _mm512_maskz_loadu_ps(m0, bias);
        c1 = _mm512_maskz_loadu_ps(m1, bias + 16);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        if (i >= rows) break;
        float *o = out + (size_t)i * ldo;
        if (!first) {
            c0 = _mm512_maskz_loadu_ps(m0, o);
            c1 = _mm512_maskz_loadu_ps(m1, o + 16);
        }
        _mm512_mask_storeu_ps(o, m0, _mm512_add_ps(acc[i][0], c0));
        _mm512_mask_storeu_ps(o + 16, m1, _mm512_add_ps(acc[i][1], c1));
    }
}

AVX512BF16 static void linear_avx512(float *out, const float *in, const gemm_bf16_weight *w,
                                     const float *bias, int R, int col_lo, int col_hi)
{
    _Alignas(64) uint32_t a[MC * KC];
    int K = w->K, N = w->N, j_lo = col_lo / PANEL, j_hi = (col_hi + PANEL - 1) / PANEL;
    for (int p0 = 0; p0 < w->pairs; p0 += KC) {
        int np = w->pairs - p0 < KC ? w->pairs - p0 : KC;
        for (int r0 = 0; r0 < R; r0 += MC) {
            int mr = R - r0 < MC ? R - r0 : MC;
            pack_rows(a, in + (size_t)r0 * K, K, mr, p0, np);
            for (int j = j_lo; j < j_hi; j++) {
                const uint16_t *b = w->data + ((size_t)j * w->pairs + p0) * 2 * PANEL;
                int n0 = j * PANEL, cols = (col_hi < N ? col_hi : N) - n0;
                if (cols > PANEL) cols = PANEL;
                __mmask16 m0, m1;
                gemm_panel_masks(cols, &m0, &m1);
                for (int i = 0; i < mr; i += MR)
                    kernel(np, a + (size_t)i * KC, b, out + (size_t)(r0 + i) * N + n0, N,
                           mr - i < MR ? mr - i : MR, m0, m1, bias ? bias + n0 : NULL, p0 == 0);
            }
        }
    }
}

/* ---- entry points (gemm_common.h) ---------------------------------------- */

GEMM_ENTRY_POINTS(bf16)
