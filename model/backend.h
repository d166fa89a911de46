/* backend.h: the table of tensor operations the encoder is written against.
 *
 * A backend is a struct of function pointers plus its own context (ggml's
 * pattern). The CPU backend (backend_cpu.c, OpenBLAS) is the reference; a GPU
 * backend implements the same table and is tested op by op against it.
 *
 * Conventions, written once:
 * - All matrices are row-major float32. Pointers passed to ops are memory of
 *   that backend (alloc/upload/download are the only way across).
 * - Weights are stored (out, in), so a linear layer is y = x · Wᵀ + b.
 * - matmul computes C(M,N) = alpha · op(A)(M,K) · op(B)(K,N) + beta · C, where
 *   op(A) = A (M,K, leading dim lda) or Aᵀ when transA (A stored (K,M)); the
 *   same for B. On cuBLAS (column-major) this is the call with A and B swapped.
 * - Every op returns SM_OK or an error code; the CPU ops cannot fail.
 */
#ifndef SM_BACKEND_H
#define SM_BACKEND_H

#include <stddef.h>

typedef struct backend backend;

struct backend {
    const char *name; /* "cpu", "cuda" */
    void *ctx;        /* backend-private state */

    void *(*alloc)(backend *be, size_t bytes);
    void (*free)(backend *be, void *p);
    int (*upload)(backend *be, void *dst, const void *src, size_t bytes);
    int (*download)(backend *be, void *dst, const void *src, size_t bytes);

    int (*matmul)(backend *be, int transA, int transB, int M, int N, int K,
                  float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc);
    /* `batch` independent matmuls, operand i at A + i*strideA, etc. */
    int (*matmul_batched)(backend *be, int transA, int transB, int M, int N,
                          int K, float alpha, const float *A, int lda,
                          long long strideA, const float *B, int ldb,
                          long long strideB, float beta, float *C, int ldc,
                          long long strideC, int batch);
    /* out(R,N) = in(R,K) · W(N,K)ᵀ + b(N); b may be NULL. */
    int (*linear)(backend *be, float *out, const float *in, const float *W,
                  const float *b, int R, int K, int N);
    /* out = a + b, n elements (out may alias a). */
    int (*add)(backend *be, float *out, const float *a, const float *b,
               size_t n);
    /* out(R,C) = (in - mean) * rstd * w + b per row; mean/rstd (R) are saved
     * for a backward pass when non-NULL. out may alias in. */
    int (*layernorm)(backend *be, float *out, float *mean, float *rstd,
                     const float *in, const float *w, const float *b, int R,
                     int C, float eps);
    /* Exact GELU: x * 0.5 * (1 + erf(x / sqrt 2)). out may alias in. */
    int (*gelu)(backend *be, float *out, const float *in, size_t n);
    int (*tanh)(backend *be, float *out, const float *in, size_t n);
    /* out(B,T,C) = word[ids[b,t]] + pos[t + pos_offset] + type[types[b,t]]
     * (+ task[0] when task != NULL). ids/types are backend int memory;
     * types may be NULL (all zero). */
    int (*embed)(backend *be, float *out, const int *ids, const int *types,
                 const float *word, const float *pos, const float *type,
                 const float *task, int B, int T, int C, int pos_offset);
    /* qkv(B,T,3,H,d) -> q,k,v each (B,H,T,d). */
    int (*attn_split)(backend *be, float *q, float *k, float *v,
                      const float *qkv, int B, int T, int H, int d);
    /* in(B,H,T,d) -> out(B,T,H,d). */
    int (*attn_merge)(backend *be, float *out, const float *in, int B, int T,
                      int H, int d);
    /* att(B,H,T,T): softmax over the last axis of scale * att, with keys at
     * positions >= lengths[b] masked out (probability 0). lengths is backend
     * int memory. */
    int (*softmax_masked)(backend *be, float *att, const int *lengths, int B,
                          int H, int T, float scale);
    /* Multi-head self-attention core, fused: for each sequence b and head h,
     * q, k, v are the h-th d-wide slices of qkv(B,T,3C) rows (query, key,
     * value blocks of C each), att(b,h) = softmax(scale * q kᵀ) over keys
     * t < lengths[b], and out(B,T,C)[b,t,h*d:(h+1)*d] = att(b,h) v for
     * t < lengths[b]; rows t >= lengths[b] (padding) are set to 0.
     * att(B,H,T,T) is scratch that holds the probabilities afterwards (for a
     * backward pass); lengths is backend int memory. */
    int (*attention)(backend *be, float *out, float *att, const float *qkv,
                     const int *lengths, int B, int T, int H, int d,
                     float scale);
    /* Rows (B,C) gathered from x(B,T,C) at t = 0: the [CLS] vectors. */
    int (*gather_cls)(backend *be, float *out, const float *x, int B, int T,
                      int C);
    int (*synchronize)(backend *be);
    void (*destroy)(backend *be);
};

/* The CPU backend; threads <= 0 means "all cores". */
int backend_cpu_create(int threads, backend **out, char *err);
int backend_cpu_threads(const backend *be);

#endif
