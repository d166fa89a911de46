/* gemm_f32.c: FP32 linear layers over weights packed once (see
 * gemm_f32.h).
 *
 * Owns the packed-weight layout, the CPU check, the AVX-512F kernel and its
 * plain C twin (the fall-back and the reference).
 *
 * The kernel: the rows are cut into blocks of equal height whose inputs
 * fit ROW_BLOCK_BYTES (so one sequence's rows are usually one block and
 * each weight panel is read from memory once per product), and K into
 * blocks of KC; for each 32-column panel an MR x 32 tile of the output is
 * kept in 2 x MR zmm accumulators while the k of a block stream by: per k,
 * two loads of the panel (16 columns each) and for each row one broadcast
 * of x[r][k] (read in place from the input row: copying the rows into a
 * tile layout first measured slower) and two FMAs. A panel's K block (KC x
 * 128 bytes) stays in L2 across the row tiles of a row block, and the row
 * block's inputs in L2 across the panels; while the first tiles of a
 * panel run, the next panel is prefetched into L2, so a panel that comes
 * from memory (a batch of one sequence reads every weight once: 9.4 MiB
 * a layer on BERT-base) does not stall the FMAs. ERNIE-medium shape, one
 * sequence at a time: 11.3 -> 13.0 sequences/s (blocks of 72 rows before,
 * no prefetch). KC is large enough that
 * the encoders' K (up to 4096) need no K blocking: on a Xeon with 48 KiB
 * L1 and 2 MiB L2 that measured faster than blocks that fit a panel's
 * block in L1 (KC = 256: 7% slower at K = 3072), the L2 streams the panel
 * faster than the FMAs use it. The accumulators
 * start from the bias (first K block) or from the output (later blocks:
 * the partial chain parked there), so the FMA chain of each output runs in
 * k order from the bias whatever the blocking; the last block stores the
 * result. A tile fetches its output lines into L1 first, as gemm_int8.c
 * does (N = 3072: 217 -> 232 GFLOP/s). Ragged columns are
 * loaded and stored with masks (the padded
 * weights are zero); the row tile is compiled for every height 1 .. MR, so
 * ragged rows are neither computed nor read.
 */
#include "cpu/gemm_f32.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "cpu/features.h"
#include "cpu/gemm_common.h"

#define PANEL GEMM_F32_PANEL
#define MR 12                     /* rows of the register tile: 24 accumulators */
#define KC 4096                   /* k per block: a panel's block is up to 512 KiB */
#define ROW_BLOCK_BYTES (1 << 20) /* a row block's inputs: half of a 2 MiB L2 */
#define MC_MAX 384                /* rows per block at most (a multiple of MR) */

#define AVX512F_FN __attribute__((target("avx512f")))

/* ---- the CPU check ------------------------------------------------------- */

int gemm_f32_supported(void)
{
    return cpu_has(CPU_AVX512F);
}

/* ---- packing ------------------------------------------------------------- */

/* Index of W[n][k] in the packed data. */
static size_t packed_index(const gemm_f32_weight *w, int n, int k)
{
    int j = n / PANEL, c = n % PANEL;
    return ((size_t)j * w->K + (size_t)k) * PANEL + c;
}

int gemm_f32_pack(const float *W, int N, int K, gemm_f32_weight **out, char *err)
{
    *out = NULL;
    if (N < 1 || K < 1 || N > (1 << 24) || K > (1 << 24))
        return sm_error(err, SM_ERR_INVALID, "f32 weight: shape (%d, %d) is out of range", N, K);
    gemm_f32_weight *w = calloc(1, sizeof *w);
    if (!w) return sm_error(err, SM_ERR_NOMEM, "out of memory packing an f32 weight");
    w->N = N;
    w->K = K;
    w->panels = (N + PANEL - 1) / PANEL;
    size_t bytes;
    w->data = gemm_packed_alloc((size_t)w->panels * K * PANEL, sizeof *w->data, &bytes);
    if (!w->data) {
        free(w);
        return sm_error(err, SM_ERR_NOMEM, "out of memory: a (%d, %d) f32 weight needs %zu KiB", N,
                        K, bytes >> 10);
    }
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) w->data[packed_index(w, n, k)] = W[(size_t)n * K + k];
    *out = w;
    return SM_OK;
}

void gemm_f32_free(gemm_f32_weight *w)
{
    if (!w) return;
    free(w->data);
    free(w);
}

float gemm_f32_unpack(const gemm_f32_weight *w, int n, int k)
{
    return w->data[packed_index(w, n, k)];
}

/* ---- plain C ------------------------------------------------------------- */

void gemm_f32_linear_scalar(float *out, const float *in, const gemm_f32_weight *w,
                            const float *bias, int R, int col_lo, int col_hi)
{
    int K = w->K, N = w->N;
    if (col_hi > N) col_hi = N;
    for (int r = 0; r < R; r++) {
        const float *x = in + (size_t)r * K;
        for (int n = col_lo; n < col_hi; n++) {
            const float *b = w->data + packed_index(w, n, 0);
            float acc = bias ? bias[n] : 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(x[k], b[(size_t)k * PANEL], acc);
            out[(size_t)r * N + n] = acc;
        }
    }
}

/* ---- AVX-512F ------------------------------------------------------------ */

/* The out tile (`rows` rows, a compile-time constant <= MR, of 32 columns
 * masked by m0, m1; row stride ldo) of the input rows a (stride lda, this
 * K block's first k) times a panel's K block b (nk k). first: the chain
 * starts from the bias (NULL: 0), else from the values parked in out.
 * pf (may be NULL): nk * pf_step cache lines from there are prefetched into
 * L2, pf_step (1 or 2) per k, while the FMAs run. */
AVX512F_FN static inline __attribute__((always_inline)) void
tile(const int rows, int nk, const float *a, size_t lda, const float *b, float *out, size_t ldo,
     __mmask16 m0, __mmask16 m1, const float *bias, int first, const char *pf, int pf_step)
{
    __m512 acc[MR][2];
    const float *ap[MR];
    if (first) {
        __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
        if (bias) {
            c0 = _mm512_maskz_loadu_ps(m0, bias);
            c1 = _mm512_maskz_loadu_ps(m1, bias + 16);
        }
#pragma GCC unroll 16
        for (int i = 0; i < rows; i++) acc[i][0] = c0, acc[i][1] = c1;
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < rows; i++) {
            acc[i][0] = _mm512_maskz_loadu_ps(m0, out + i * ldo);
            acc[i][1] = _mm512_maskz_loadu_ps(m1, out + i * ldo + 16);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < rows; i++) {
        ap[i] = a + i * lda;
        /* the tile's output lines fetched into L1 now rather than when
         * stored (see gemm_int8.c) */
        _mm_prefetch((const char *)(out + i * ldo), _MM_HINT_T0);
        _mm_prefetch((const char *)(out + i * ldo + 16), _MM_HINT_T0);
    }
#pragma GCC unroll 2
    for (int k = 0; k < nk; k++, b += PANEL) {
        if (pf) {
            _mm_prefetch(pf, _MM_HINT_T1);
            if (pf_step == 2) _mm_prefetch(pf + 64, _MM_HINT_T1);
            pf += 64 * pf_step;
        }
        __m512 b0 = _mm512_load_ps(b);
        __m512 b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 16
        for (int i = 0; i < rows; i++) {
            __m512 x = _mm512_set1_ps(ap[i][k]);
            acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < rows; i++) {
        _mm512_mask_storeu_ps(out + i * ldo, m0, acc[i][0]);
        _mm512_mask_storeu_ps(out + i * ldo + 16, m1, acc[i][1]);
    }
}

typedef void (*tile_fn)(int nk, const float *a, size_t lda, const float *b, float *out, size_t ldo,
                        __mmask16 m0, __mmask16 m1, const float *bias, int first, const char *pf,
                        int pf_step);

#define TILE(n)                                                                                \
    __attribute__((noinline))                                                                  \
    AVX512F_FN static void tile_##n(int nk, const float *a, size_t lda, const float *b,        \
                                    float *out, size_t ldo, __mmask16 m0, __mmask16 m1,        \
                                    const float *bias, int first, const char *pf, int pf_step) \
    {                                                                                          \
        tile(n, nk, a, lda, b, out, ldo, m0, m1, bias, first, pf, pf_step);                    \
    }
GEMM_TILES_1_TO_12(tile_fn)
_Static_assert(MR == 12, "k_tiles holds the tiles of 1 .. 12 rows");
#undef TILE

/* Rows per block for R rows of K inputs: blocks of equal height (a
 * multiple of MR) whose inputs fit ROW_BLOCK_BYTES, so a single sequence's
 * rows are usually one block and each weight panel is read from memory
 * once per product. */
static int row_block(int R, int K)
{
    long fit = ROW_BLOCK_BYTES / ((long)(K < KC ? K : KC) * (long)sizeof(float));
    int most = fit >= MC_MAX ? MC_MAX : fit < MR ? MR : (int)fit / MR * MR;
    int blocks = (R + most - 1) / most;
    int rows = (R + blocks - 1) / blocks;
    return (rows + MR - 1) / MR * MR;
}

AVX512F_FN static void linear_avx512(float *out, const float *in, const gemm_f32_weight *w,
                                     const float *bias, int R, int col_lo, int col_hi)
{
    int K = w->K, N = w->N, j_lo = col_lo / PANEL, j_hi = (col_hi + PANEL - 1) / PANEL;
    int mc = row_block(R, K);
    for (int r0 = 0; r0 < R; r0 += mc) {
        int mr = R - r0 < mc ? R - r0 : mc;
        int tiles = (mr + MR - 1) / MR;
        for (int k0 = 0; k0 < K; k0 += KC) {
            int nk = K - k0 < KC ? K - k0 : KC;
            for (int j = j_lo; j < j_hi; j++) {
                const float *b = w->data + ((size_t)j * K + k0) * PANEL;
                /* The next panel's K block (2 cache lines per k) is fetched
                 * into L2 by the first tiles while this one's run from L2:
                 * one tile fetches all of it, or two tiles half each. */
                const char *next = j + 1 < j_hi ? (const char *)(b + (size_t)K * PANEL) : NULL;
                int n0 = j * PANEL, cols = col_hi - n0;
                if (cols > PANEL) cols = PANEL;
                __mmask16 m0, m1;
                gemm_panel_masks(cols, &m0, &m1);
                for (int t = 0; t < tiles; t++) {
                    int i = t * MR, rows = mr - i < MR ? mr - i : MR;
                    const char *pf = NULL;
                    int pf_step = 1;
                    if (next && tiles == 1) pf = next, pf_step = 2;
                    else if (next && t < 2) pf = next + (size_t)t * nk * 64;
                    k_tiles[rows](nk, in + (size_t)(r0 + i) * K + k0, (size_t)K, b,
                                  out + (size_t)(r0 + i) * N + n0, (size_t)N, m0, m1,
                                  bias ? bias + n0 : NULL, k0 == 0, pf, pf_step);
                }
            }
        }
    }
}

/* ---- entry points (gemm_common.h) ---------------------------------------- */

GEMM_ENTRY_POINTS(f32)
