/* gemm_f32.h: FP32 linear layers with weights packed once, for CPUs with
 * AVX-512F: the encoder's inference products without the per-call costs
 * of a general sgemm (packing the weight, zeroing or scaling the output,
 * a separate pass that broadcasts the bias).
 *
 * A weight W (N rows, K columns, row-major float; y = x · Wᵀ + b) is
 * copied once into panels of GEMM_F32_PANEL output columns; within a
 * panel, for each k, the values of the panel's columns side by side
 * (two zmm loads). N is padded to a whole panel with zeros; K is not
 * padded. The input rows are read in place (no copy).
 *
 * Arithmetic, everywhere (kernel and plain C alike): each output is one
 * chain of fused multiply-adds in k order that starts from the bias,
 *     out[r][n] = fma(x[K-1], w[n][K-1], ... fma(x[0], w[n][0], bias[n])),
 * (bias 0 when NULL), so the AVX-512 kernel, the plain C code and any
 * split of the work by rows or columns give the same bits. The error is
 * that of a sequential FP32 sum: at most about K * 2^-24 of
 * |bias| + sum_k |x_k w_k|, typically sqrt(K) times less. Infinities and
 * NaNs propagate as IEEE arithmetic says; no flush of denormals.
 *
 * The AVX-512 code is compiled with function target attributes, so the
 * library builds for any x86-64; gemm_f32_linear runs it only when
 * gemm_f32_supported() says the CPU and OS have it, and otherwise falls
 * back to plain C over the same packed weights (slow; correct anywhere).
 * All functions are single-threaded and reentrant; callers split the work
 * (gemm_f32_linear_cols).
 *
 * Private to cpu/: the CPU backend's BACKEND_PACK_F32 kind (backend_cpu.c)
 * is how model code reaches it; tests and benchmarks may include it.
 */
#ifndef SM_GEMM_F32_H
#define SM_GEMM_F32_H

#define GEMM_F32_PANEL 32 /* output columns per packed panel */

typedef struct gemm_f32_weight {
    int N, K;    /* the weight's shape (N outputs, K inputs) */
    int panels;  /* (N + GEMM_F32_PANEL - 1) / GEMM_F32_PANEL */
    float *data; /* panels * K * GEMM_F32_PANEL values, 64-byte aligned,
                    owned */
} gemm_f32_weight;

/* 1 when this CPU and OS run AVX-512F code. */
int gemm_f32_supported(void);

/* Packs W(N,K) into *out (allocated; free with gemm_f32_free). Returns
 * SM_OK, SM_ERR_INVALID for a bad shape or SM_ERR_NOMEM, with a message in
 * err (SM_ERR_MAX bytes, may be NULL). Any values (non-finite too). */
int gemm_f32_pack(const float *W, int N, int K, gemm_f32_weight **out, char *err);
void gemm_f32_free(gemm_f32_weight *w);
/* W[n][k] as packed (0 in the padding, n up to panels * PANEL). */
float gemm_f32_unpack(const gemm_f32_weight *w, int n, int k);

/* out(R,N) = in(R,K) · Wᵀ + bias(N), all row-major and dense; bias may be
 * NULL. SM_ERR_INVALID (and nothing written) when K and N are not w's. */
int gemm_f32_linear(float *out, const float *in, const gemm_f32_weight *w, const float *bias, int R,
                    int K, int N);
/* The same for output columns [col_lo, col_hi) only, col_lo a multiple of
 * GEMM_F32_PANEL: the part one thread computes when a product is split by
 * columns. out and in keep their full row strides (N and K). */
void gemm_f32_linear_cols(float *out, const float *in, const gemm_f32_weight *w, const float *bias,
                          int R, int col_lo, int col_hi);
/* gemm_f32_linear_cols in plain C on any CPU: the fall-back, and the
 * reference the kernel must match bit for bit. */
void gemm_f32_linear_scalar(float *out, const float *in, const gemm_f32_weight *w,
                            const float *bias, int R, int col_lo, int col_hi);

#endif
