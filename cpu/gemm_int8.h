/* gemm_int8.h: linear layers with 8-bit integer operands and 32-bit integer
 * sums, for CPUs with AVX512-VNNI (vpdpbusd: 64 multiply-adds of u8 x s8 per
 * instruction, about 3.5 times the FP32 FMA rate on a core that has both).
 *
 * out(R,N) = in(R,K) · Wᵀ + bias, with W (N rows, K columns, row-major
 * float) quantized once and the rows of `in` quantized on the fly:
 *
 * Weights, per row n of W (one output column): symmetric s8,
 *     wscale[n] = max_k |W[n][k]| / 127,
 *     qw[n][k]  = clamp(round(W[n][k] * (127 / max_k |W[n][k]|)), -127, 127)
 * (a zero row: wscale 0, all q 0). Packed for vpdpbusd: panels of
 * GEMM_INT8_PANEL output columns; within a panel, for each quad of k
 * (4q .. 4q+3), the four s8 values of each column side by side, column
 * after column. K is padded to a multiple of 4 and N to a whole panel with
 * zeros. colsum[n] = sum_k qw[n][k].
 *
 * Activations, per row r (per token), asymmetric u8 over [lo, hi] =
 * [min(0, min_k x), max(0, max_k x)] (0 is always exact):
 *     xscale = (hi - lo) / 255, inv = 255 / (hi - lo),
 *     zero   = round(-lo * inv)                      (0 .. 255),
 *     qx[k]  = clamp(round(x[k] * inv) + zero, 0, 255);
 * an all-zero row has xscale 0, zero 0; a row with an infinity or NaN (or
 * whose range overflows) gets xscale NaN, so its outputs are NaN.
 *
 * Output: with the exact integer sum acc = sum_k qx[k] qw[n][k],
 *     out[r][n] = fmaf((float)(acc - zero * colsum[n]), xscale * wscale[n],
 *                      bias[n] or 0).
 * round() is to nearest, ties to even; every step is one IEEE operation in
 * a fixed order, so the AVX-512 kernel and the plain C code give the same
 * bits. The quantization error is about half a step of each operand:
 * |out - exact| <~ (xscale/2) sum_k |w_k| + (wscale/2) sum_k |x_k|.
 * K is limited to GEMM_INT8_MAX_K so the 32-bit sums cannot overflow.
 *
 * The AVX-512 code is compiled with function target attributes, so the
 * library builds for any x86-64; gemm_int8_linear runs it only when
 * gemm_int8_supported() says the CPU and OS have it, and otherwise falls
 * back to plain C over the same packed weights (slow; correct anywhere).
 * All functions are single-threaded and reentrant; callers split the work
 * (gemm_int8_linear_cols).
 *
 * Private to cpu/: the CPU backend's BACKEND_PACK_INT8 kind (backend_cpu.c)
 * is how model code reaches it; tests and benchmarks may include it.
 */
#ifndef SM_GEMM_INT8_H
#define SM_GEMM_INT8_H

#include <stdint.h>

#define GEMM_INT8_PANEL 32    /* output columns per packed panel */
#define GEMM_INT8_MAX_K 32768 /* 255 * 127 * K stays below 2^31 */

typedef struct gemm_int8_weight {
    int N, K;        /* the float weight's shape (N outputs, K inputs) */
    int quads;       /* (K + 3) / 4 */
    int panels;      /* (N + GEMM_INT8_PANEL - 1) / GEMM_INT8_PANEL */
    int8_t *data;    /* panels * quads * 4 * GEMM_INT8_PANEL values,
                        64-byte aligned, owned */
    float *wscale;   /* panels * GEMM_INT8_PANEL (0 past N), owned */
    int32_t *colsum; /* panels * GEMM_INT8_PANEL (0 past N), owned */
} gemm_int8_weight;

/* 1 when this CPU and OS run AVX512-F/BW/VL and AVX512-VNNI code. */
int gemm_int8_supported(void);

/* Quantizes W(N,K) into *out (allocated; free with gemm_int8_free).
 * SM_ERR_INVALID for a shape out of range (K > GEMM_INT8_MAX_K) or a
 * non-finite weight, SM_ERR_NOMEM. */
int gemm_int8_pack(const float *W, int N, int K, gemm_int8_weight **out, char *err);
void gemm_int8_free(gemm_int8_weight *w);
/* qw[n][k] as packed (0 in the padding). */
int gemm_int8_unpack(const gemm_int8_weight *w, int n, int k);

/* The quantization of one row of activations (x, K values): xscale and
 * zero as above; q (K values, may be NULL) gets qx. */
void gemm_int8_quantize_row(const float *x, int K, uint8_t *q, float *xscale, int *zero);

/* out(R,N) = in(R,K) · Wᵀ + bias(N), all row-major and dense; bias may be
 * NULL. SM_ERR_INVALID (and nothing written) when K and N are not w's. */
int gemm_int8_linear(float *out, const float *in, const gemm_int8_weight *w, const float *bias,
                     int R, int K, int N);
/* The same for output columns [col_lo, col_hi) only, col_lo a multiple of
 * GEMM_INT8_PANEL: the part one thread computes when a product is split by
 * columns. out and in keep their full row strides (N and K). Rows are
 * quantized independently, so any split by rows or columns gives the bits
 * of one call. */
void gemm_int8_linear_cols(float *out, const float *in, const gemm_int8_weight *w,
                           const float *bias, int R, int col_lo, int col_hi);
/* gemm_int8_linear_cols in plain C on any CPU: the fall-back, and the
 * reference the kernel must match bit for bit. */
void gemm_int8_linear_scalar(float *out, const float *in, const gemm_int8_weight *w,
                             const float *bias, int R, int col_lo, int col_hi);

#endif
