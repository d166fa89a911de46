/* gemm_plan.h: how a row-major matmul of backend.h becomes one column-major
 * cuBLAS call, and which elements of each operand that call reads.
 *
 * backend.h: C(M,N) = alpha · op(A)(M,K) · op(B)(K,N) + beta · C, all
 * row-major. A row-major matrix X with leading dimension ld is, read
 * column-major with the same ld, its transpose Xᵀ. So the row-major C is the
 * column-major Cᵀ (N x M, ld ldc), and Cᵀ = op(B)ᵀ · op(A)ᵀ: the cuBLAS call
 * has m = N, n = M, k = K, B as its first operand and A as its second, each
 * transposed exactly when the backend call transposes it (B stored (K,N)
 * row-major already reads as op(B)ᵀ (N,K) column-major: CUBLAS_OP_N; B
 * stored (N,K) reads as (K,N), so it needs CUBLAS_OP_T). Leading dimensions
 * and strides carry over unchanged.
 *
 * Pure host code with no CUDA types, so tests/gpu/test_cuda.c checks it on any
 * machine against a plain column-major GEMM.
 */
#ifndef SM_GEMM_PLAN_H
#define SM_GEMM_PLAN_H

#include <stddef.h>

typedef struct gemm_plan {
    /* the column-major call: C(m x n, ldc) = op1(first) · op2(second) */
    int m, n, k;
    int trans_first, trans_second; /* 1 = CUBLAS_OP_T, 0 = CUBLAS_OP_N */
    int first_is_b;                /* always 1: first = B, second = A */
    int ld_first, ld_second;
    long long stride_first, stride_second;
    /* elements of A and B (from their base pointers) the call may read,
     * over all `batch` matrices */
    size_t extent_a, extent_b;
} gemm_plan;

/* Elements spanned by `batch` row-major matrices of rows x cols with
 * leading dimension ld, `stride` elements apart. */
static inline size_t gemm_extent(int rows, int cols, int ld, long long stride, int batch)
{
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (size_t)(rows - 1) * (size_t)ld + (size_t)cols +
           (size_t)(batch - 1) * (size_t)(stride > 0 ? stride : 0);
}

/* 0 when the arguments describe a valid call, else -1 (negative sizes, a
 * leading dimension shorter than a stored row, a negative stride). */
static inline int gemm_plan_make(int transA, int transB, int M, int N, int K, int lda,
                                 long long strideA, int ldb, long long strideB, int ldc,
                                 long long strideC, int batch, gemm_plan *p)
{
    if (M < 0 || N < 0 || K < 0 || batch < 0) return -1;
    if (strideA < 0 || strideB < 0 || strideC < 0) return -1;
    /* stored shapes: A (M,K) or (K,M); B (K,N) or (N,K); C (M,N) */
    int a_rows = transA ? K : M, a_cols = transA ? M : K;
    int b_rows = transB ? N : K, b_cols = transB ? K : N;
    if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < (N > 1 ? N : 1))
        return -1;
    p->m = N;
    p->n = M;
    p->k = K;
    p->first_is_b = 1;
    p->trans_first = transB ? 1 : 0;
    p->trans_second = transA ? 1 : 0;
    p->ld_first = ldb;
    p->ld_second = lda;
    p->stride_first = strideB;
    p->stride_second = strideA;
    p->extent_a = gemm_extent(a_rows, a_cols, lda, strideA, batch);
    p->extent_b = gemm_extent(b_rows, b_cols, ldb, strideB, batch);
    return 0;
}

#endif
