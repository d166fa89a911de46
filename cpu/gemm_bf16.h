/* gemm_bf16.h: linear layers with BF16 operands and FP32 accumulation, for
 * CPUs with AVX512-BF16 (vdpbf16ps: twice the multiply-adds of an FP32 FMA
 * per instruction).
 *
 * A weight W (N rows, K columns, row-major float; y = x · Wᵀ + b) is
 * converted once to BF16, rounded to nearest even, and packed for the
 * kernel: panels of GEMM_BF16_PANEL output columns; within a panel, for
 * each pair of k (2p, 2p+1), the two BF16 values of each column side by
 * side, column after column, as vdpbf16ps reads them. K is padded to even
 * and N to a whole panel with zeros. The input rows are rounded the same
 * way as they are read, a block at a time.
 *
 * Rounding, everywhere: round to nearest, ties to even; a NaN stays a
 * (quiet) NaN of the same sign, infinities stay infinite, a value too large
 * for BF16 rounds to infinity. Products of two BF16 values are exact in
 * FP32; they are summed in FP32 in pair order, so results differ from an
 * FP32 product only by the rounding of the operands (each at most 2^-8
 * relative, so about 2^-7 of the sum of |x_k w_k| at worst) and from
 * gemm_bf16_ref only in the order of FP32 additions (and in denormal
 * operands, which vdpbf16ps reads as 0).
 *
 * The AVX-512 code is compiled with function target attributes, so the
 * library builds for any x86-64; gemm_bf16_linear runs it only when
 * gemm_bf16_supported() says the CPU and OS have it, and otherwise falls
 * back to a plain C loop over the same packed weights (slow; for tests and
 * for correctness on any machine). All functions are single-threaded and
 * reentrant; callers split the work (gemm_bf16_linear_cols).
 *
 * Private to cpu/: the CPU backend's BACKEND_PACK_BF16 kind (backend_cpu.c)
 * is how model code reaches it; tests and benchmarks may include it.
 */
#ifndef SM_GEMM_BF16_H
#define SM_GEMM_BF16_H

#include <stdint.h>

#define GEMM_BF16_PANEL 32 /* output columns per packed panel */

typedef struct gemm_bf16_weight {
    int N, K;       /* the float weight's shape (N outputs, K inputs) */
    int pairs;      /* (K + 1) / 2 */
    int panels;     /* (N + GEMM_BF16_PANEL - 1) / GEMM_BF16_PANEL */
    uint16_t *data; /* panels * pairs * 2 * GEMM_BF16_PANEL BF16 values,
                         64-byte aligned, owned */
} gemm_bf16_weight;

/* 1 when this CPU and OS run AVX512-F/BW/VL and AVX512-BF16 code. */
int gemm_bf16_supported(void);

/* One float to BF16 bits (the rounding above), and back (exact). */
uint16_t gemm_bf16_round(float x);
float gemm_bf16_to_float(uint16_t h);

/* Packs W(N,K) into *out (allocated; free with gemm_bf16_free). Returns
 * SM_OK, SM_ERR_INVALID for a bad shape or SM_ERR_NOMEM, with a message in
 * err (SM_ERR_MAX bytes, may be NULL). */
int gemm_bf16_pack(const float *W, int N, int K, gemm_bf16_weight **out, char *err);
void gemm_bf16_free(gemm_bf16_weight *w);
/* The BF16 value of W[n][k] as packed, as a float (0 in the padding). */
float gemm_bf16_unpack(const gemm_bf16_weight *w, int n, int k);

/* out(R,N) = in(R,K) · Wᵀ + bias(N), all row-major and dense; bias may be
 * NULL. SM_ERR_INVALID (and nothing written) when K and N are not w's. */
int gemm_bf16_linear(float *out, const float *in, const gemm_bf16_weight *w, const float *bias,
                     int R, int K, int N);
/* The same for output columns [col_lo, col_hi) only, col_lo a multiple of
 * GEMM_BF16_PANEL: the part one thread computes when a product is split by
 * columns. out and in keep their full row strides (N and K). */
void gemm_bf16_linear_cols(float *out, const float *in, const gemm_bf16_weight *w,
                           const float *bias, int R, int col_lo, int col_hi);
/* gemm_bf16_linear_cols in plain C on any CPU (the fall-back). */
void gemm_bf16_linear_scalar(float *out, const float *in, const gemm_bf16_weight *w,
                             const float *bias, int R, int col_lo, int col_hi);

/* The reference: out(R,N) = round(in) · round(W)ᵀ + bias with float W(N,K),
 * summed in FP32 in the kernel's pair order. */
void gemm_bf16_ref(float *out, const float *in, const float *W, const float *bias, int R, int K,
                   int N);

#endif
