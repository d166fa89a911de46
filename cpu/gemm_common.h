/* gemm_common.h: what the packed GEMM kinds (gemm_bf16.c, gemm_f32.c,
 * gemm_int8.c) share, written once: the packed data's allocation
 * (gemm_packed_alloc), the column masks of a 32-column panel
 * (gemm_panel_masks), the table of register tiles by height
 * (GEMM_TILES_1_TO_12) and the two entry points every kind has.
 * GEMM_ENTRY_POINTS(kind), at the end of gemm_<kind>.c, defines what
 * gemm_<kind>.h declares:
 *   gemm_<kind>_linear_cols  the columns clamped to the weight's N, then
 *                            the file's own linear_avx512 where
 *                            gemm_<kind>_supported() says this CPU runs
 *                            it, else gemm_<kind>_linear_scalar;
 *   gemm_<kind>_linear       the shape checked against the weight's, then
 *                            every column.
 * Private to cpu/.
 */
#ifndef SM_GEMM_COMMON_H
#define SM_GEMM_COMMON_H

#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

/* A weight's packed data, count elements of size bytes: 64-byte aligned,
 * rounded up to 64 bytes (*bytes) and zeroed, the padding included (the
 * kernels read it as zeros). NULL when out of memory. */
static inline void *gemm_packed_alloc(size_t count, size_t size, size_t *bytes)
{
    void *p;
    *bytes = (count * size + 63) & ~(size_t)63;
    p = aligned_alloc(64, *bytes);
    if (p) memset(p, 0, *bytes);
    return p;
}

/* The store masks of a panel of 32 columns of which the first cols are
 * real (cols >= 1): m0 for columns 0..15, m1 for 16..31, one bit a column
 * (__mmask16 values). */
static inline void gemm_panel_masks(int cols, unsigned short *m0, unsigned short *m1)
{
    *m0 = cols >= 16 ? 0xffff : (unsigned short)((1u << cols) - 1);
    *m1 = cols >= 32 ? 0xffff : cols <= 16 ? 0 : (unsigned short)((1u << (cols - 16)) - 1);
}

/* The register tiles of every height 1 .. 12 that a kind's file defines
 * with its own TILE(n) macro (a noinline tile_n calling its always-inline
 * tile with the constant n), and k_tiles, the table of them by height
 * (k_tiles[0] NULL), of the file's function type fn_type. */
#define GEMM_TILES_1_TO_12(fn_type)                                                               \
    TILE(1)                                                                                       \
    TILE(2)                                                                                       \
    TILE(3)                                                                                       \
    TILE(4)                                                                                       \
    TILE(5)                                                                                       \
    TILE(6)                                                                                       \
    TILE(7)                                                                                       \
    TILE(8)                                                                                       \
    TILE(9)                                                                                       \
    TILE(10)                                                                                      \
    TILE(11)                                                                                      \
    TILE(12)                                                                                      \
    static const fn_type k_tiles[13] = {NULL,   tile_1, tile_2, tile_3,  tile_4,  tile_5, tile_6, \
                                        tile_7, tile_8, tile_9, tile_10, tile_11, tile_12};

#define GEMM_ENTRY_POINTS(kind)                                                                \
    void gemm_##kind##_linear_cols(float *out, const float *in, const gemm_##kind##_weight *w, \
                                   const float *bias, int R, int col_lo, int col_hi)           \
    {                                                                                          \
        if (col_hi > w->N) col_hi = w->N;                                                      \
        if (R < 1 || col_lo >= col_hi) return;                                                 \
        if (gemm_##kind##_supported()) linear_avx512(out, in, w, bias, R, col_lo, col_hi);     \
        else gemm_##kind##_linear_scalar(out, in, w, bias, R, col_lo, col_hi);                 \
    }                                                                                          \
                                                                                               \
    int gemm_##kind##_linear(float *out, const float *in, const gemm_##kind##_weight *w,       \
                             const float *bias, int R, int K, int N)                           \
    {                                                                                          \
        if (K != w->K || N != w->N || R < 0) return SM_ERR_INVALID;                            \
        gemm_##kind##_linear_cols(out, in, w, bias, R, 0, N);                                  \
        return SM_OK;                                                                          \
    }

#endif
