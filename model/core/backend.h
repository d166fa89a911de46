/* backend.h: the table of tensor operations the encoder is written against.
 *
 * A backend is a struct of function pointers plus its own context (ggml's
 * pattern). The CPU backend (cpu/backend_cpu.h, OpenBLAS) is the reference; a GPU
 * backend implements the same table and is tested op by op against it. Model
 * code reaches hardware through this table only: it never tests a backend's
 * name or includes a backend's own headers.
 *
 * Conventions, written once:
 * - All matrices are row-major float32. Pointers passed to ops are memory of
 *   that backend (alloc/upload/download are the only way across).
 * - Weights are stored (out, in), so a linear layer is y = x · Wᵀ + b.
 * - matmul computes C(M,N) = alpha · op(A)(M,K) · op(B)(K,N) + beta · C, where
 *   op(A) = A (M,K, leading dim lda) or Aᵀ when transA (A stored (K,M)); the
 *   same for B. On cuBLAS (column-major) this is the call with A and B swapped.
 * - Every op returns SM_OK or an error code; the CPU ops cannot fail.
 * - Packed weights (inference only): a backend that has them converts a
 *   weight once (pack_weight) into a backend_packed of one kind (BF16, INT8,
 *   packed FP32: backend_pack_kind) and multiplies by it (linear_packed).
 *   They are optional (NULL where a backend lacks them); bert_forward calls
 *   linear_packed only for the layers whose parameters carry packed copies
 *   (bert_params_pack), which training never makes, so training runs
 *   linear, and gradients and updated weights stay FP32.
 */
#ifndef SM_BACKEND_H
#define SM_BACKEND_H

#include <stddef.h>

typedef struct backend backend;

/* What a packed weight W(N,K) holds and what linear_packed computes with it,
 * out(R,N) = in(R,K) · Wᵀ + b (b may be NULL):
 *   BF16  W converted once to BF16 (round to nearest even); each input row
 *         rounded the same way as it is read; products summed in FP32.
 *         The CPU's: cpu/gemm_bf16.h.
 *   INT8  W quantized once per row n (symmetric s8, scale max|W[n]| / 127);
 *         each input row quantized to u8 with its own scale and zero point;
 *         INT32 sums, dequantized with the row's and the column's scales,
 *         + b. K is at most 32768 (the INT32 sums cannot overflow); the
 *         weights must be finite. The CPU's: cpu/gemm_int8.h.
 *   F32   W in FP32, laid out once for the kernel; FP32 arithmetic, each
 *         output one chain of fused multiply-adds in k order starting from
 *         the bias (no separate bias pass), so only the order of the sums
 *         differs from linear's. The CPU's: cpu/gemm_f32.h. */
typedef enum backend_pack_kind {
    BACKEND_PACK_BF16 = 1,
    BACKEND_PACK_INT8,
    BACKEND_PACK_F32
} backend_pack_kind;

/* A weight packed by a backend's pack_weight: opaque past this header,
 * which is its first member. Packed weights may be cached for the life of
 * the process and outlive the backend that made them (runtime/registry.c), so
 * one is freed through its own free, with no backend (backend_packed_free).
 * Read-only once made: any number of backends of the kind that made it,
 * and their lanes, may multiply by it at once. */
typedef struct backend_packed backend_packed;
struct backend_packed {
    int kind;                        /* a backend_pack_kind */
    void (*free)(backend_packed *w); /* frees w and what it owns */
};

/* Frees a packed weight (NULL: nothing). */
static inline void backend_packed_free(backend_packed *w)
{
    if (w) w->free(w);
}

/* A range of a parameter arena that shares a weight-decay setting and a
 * learning-rate group (0: the encoder, 1: the classification head): what
 * adamw_step updates. */
typedef struct backend_adamw_run {
    size_t offset, n;
    int decay;
    int head;
} backend_adamw_run;

struct backend {
    const char *name; /* "cpu", "cuda": for messages only, never tested */
    void *ctx;        /* backend-private state */
    /* 1: the backend computes on host memory, so a host array (the model's
     * parameter arena) is passed to its ops as it is, with no upload. */
    int host_memory;

    void *(*alloc)(backend *be, size_t bytes);
    void (*free)(backend *be, void *p);
    int (*upload)(backend *be, void *dst, const void *src, size_t bytes);
    int (*download)(backend *be, void *dst, const void *src, size_t bytes);

    int (*matmul)(backend *be, int transA, int transB, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
    /* `batch` independent matmuls, operand i at A + i*strideA, etc. */
    int (*matmul_batched)(backend *be, int transA, int transB, int M, int N, int K, float alpha,
                          const float *A, int lda, long long strideA, const float *B, int ldb,
                          long long strideB, float beta, float *C, int ldc, long long strideC,
                          int batch);
    /* out(R,N) = in(R,K) · W(N,K)ᵀ + b(N); b may be NULL. */
    int (*linear)(backend *be, float *out, const float *in, const float *W, const float *b, int R,
                  int K, int N);
    /* out = a + b, n elements (out may alias a). */
    int (*add)(backend *be, float *out, const float *a, const float *b, size_t n);
    /* out(R,C) = (in - mean) * rstd * w + b per row; mean/rstd (R) are saved
     * for a backward pass when non-NULL. out may alias in. */
    int (*layernorm)(backend *be, float *out, float *mean, float *rstd, const float *in,
                     const float *w, const float *b, int R, int C, float eps);
    /* Exact GELU: x * 0.5 * (1 + erf(x / sqrt 2)). out may alias in. */
    int (*gelu)(backend *be, float *out, const float *in, size_t n);
    int (*tanh)(backend *be, float *out, const float *in, size_t n);
    /* out(B,T,C) = word[ids[b,t]] + pos[t + pos_offset] + type[types[b,t]]
     * (+ task[0] when task != NULL). ids/types are backend int memory;
     * types may be NULL (all zero). */
    int (*embed)(backend *be, float *out, const int *ids, const int *types, const float *word,
                 const float *pos, const float *type, const float *task, int B, int T, int C,
                 int pos_offset);
    /* qkv(B,T,3,H,d) -> q,k,v each (B,H,T,d). */
    int (*attn_split)(backend *be, float *q, float *k, float *v, const float *qkv, int B, int T,
                      int H, int d);
    /* in(B,H,T,d) -> out(B,T,H,d). */
    int (*attn_merge)(backend *be, float *out, const float *in, int B, int T, int H, int d);
    /* att(B,H,T,T): softmax over the last axis of scale * att, with keys at
     * positions >= lengths[b] masked out (probability 0). lengths is backend
     * int memory. */
    int (*softmax_masked)(backend *be, float *att, const int *lengths, int B, int H, int T,
                          float scale);
    /* Multi-head self-attention core, fused: for each sequence b and head h,
     * q, k, v are the h-th d-wide slices of qkv(B,T,3C) rows (query, key,
     * value blocks of C each), att(b,h) = softmax(scale * q kᵀ) over keys
     * t < lengths[b], and out(B,T,C)[b,t,h*d:(h+1)*d] = att(b,h) v for
     * t < lengths[b]; rows t >= lengths[b] (padding) are set to 0.
     * att(B,H,T,T) is scratch that holds the probabilities afterwards (for a
     * backward pass); lengths is backend int memory. */
    int (*attention)(backend *be, float *out, float *att, const float *qkv, const int *lengths,
                     int B, int T, int H, int d, float scale);
    /* Optional (NULL: attention serves). attention with its two products
     * (q kᵀ, att v) computed from operands rounded to BF16, summed in
     * FP32; the softmax and att FP32 as attention's. The encoder runs it
     * for layers whose linear layers run packed BF16 or INT8 weights, whose
     * own rounding is larger. The CPU: with AVX512-BF16, else as
     * attention. */
    int (*attention_bf16)(backend *be, float *out, float *att, const float *qkv, const int *lengths,
                          int B, int T, int H, int d, float scale);
    /* Optional, the three together (NULL: inference runs the padding rows
     * too). Inference without padding rows: the rows of the B sequences
     * one after another, sequence b's lengths[b] rows (clamped to [1, T])
     * from the sum of the lengths before it, R rows in all. Row-wise ops
     * (linear, add, layernorm, gelu) run on R rows as on B T; these move
     * rows and attend within each sequence. lengths is backend int memory.
     * unpad_rows: x(B,T,C) -> x(R,C) in place (the padding rows dropped);
     * pad_rows: x(R,C) -> x(B,T,C) in place, the padding rows set to 0;
     * attention_unpadded: attention (attention_bf16 when bf16 is 1) on
     * qkv(R,3C) into out(R,C), the same values row for row; att(B,H,T,T)
     * is scratch. */
    int (*unpad_rows)(backend *be, float *x, const int *lengths, int B, int T, int C);
    int (*pad_rows)(backend *be, float *x, const int *lengths, int B, int T, int C);
    int (*attention_unpadded)(backend *be, float *out, float *att, const float *qkv,
                              const int *lengths, int B, int T, int H, int d, float scale,
                              int bf16);
    /* Optional, the two together (NULL: an inference pass that reads only
     * the [CLS] rows runs its last layer on every row). Each sequence's
     * first row only, of rows padded (packed 0: sequence b's from b T) or
     * packed as attention_unpadded's (packed 1); lengths is backend int
     * memory.
     * first_rows: in place, sequence b's first row of x moved to row b,
     * so x's first B rows are (B,C);
     * attention_first: out(B,C) row b = the attention of sequence b's
     * first query row over its real keys (attention_bf16's when bf16 is
     * 1), the same values as attention gives that row; att(B,H,T,T) is
     * scratch. */
    int (*first_rows)(backend *be, float *x, const int *lengths, int B, int T, int C, int packed);
    int (*attention_first)(backend *be, float *out, float *att, const float *qkv,
                           const int *lengths, int B, int T, int H, int d, float scale, int bf16,
                           int packed);
    /* Rows (B,C) gathered from x(B,T,C) at t = 0: the [CLS] vectors. */
    int (*gather_cls)(backend *be, float *out, const float *x, int B, int T, int C);
    int (*synchronize)(backend *be);
    void (*destroy)(backend *be);

    /* ---- the device: what it is, how full it is, why an op failed ------ */
    /* One line saying what the backend runs on, e.g. "cpu: 2 threads,
     * OpenBLAS 0.3.21" or "cuda:0 NVIDIA H200, bf16" (a GPU's line names its
     * precision; the CPU's precision is per packed weight, see below). */
    void (*describe)(const backend *be, char *desc, size_t cap);
    /* Computes in precision `name` from now on: auto, fp32, tf32, bf16,
     * bf16-fast, int8. SM_ERR_UNSUPPORTED with the reason in err when the
     * backend has no such precision. The CPU only checks that it has it: its
     * reduced precisions are weights packed once (pack_weight: BF16, INT8),
     * chosen per model by the caller. */
    int (*set_precision)(backend *be, const char *name, char *err);
    /* The device's free and total memory in bytes, for sizing batches.
     * SM_ERR_UNSUPPORTED where the memory is the host's (the CPU). */
    int (*mem_info)(backend *be, size_t *free_bytes, size_t *total_bytes);
    /* Why the last failed op of be failed, e.g. "cuda:0: cannot allocate
     * 1536.0 MiB: out of memory (free 812.4 MiB of 81559.1 MiB)"; "" when
     * none. Ops return only a code; this says why. */
    const char *(*last_error)(const backend *be);
    /* Optional (NULL: none): the raw rate of a C(M,N) = A(M,K)·B(N,K)ᵀ
     * product in the backend's precision, timed over `iters` runs: the
     * yardstick a benchmark sets its model FLOP rate against. */
    int (*gemm_tflops)(backend *be, int M, int N, int K, int iters, double *tflops, char *err);

    /* ---- training (the CPU versions are in cpu/train_ops.c) ------
     * Each *_backward takes the forward's arguments in the same order with
     * d-prefixed gradients first. The accumulation rule, once: activation
     * gradients are written (=) unless an argument says otherwise; parameter
     * gradients (dW, db, dw, dword, ...) always accumulate (+=), so the
     * micro-batches of one optimizer step add up and the caller zeroes the
     * gradient arena once per step. Reductions run in a fixed order, so the
     * same inputs give the same bits whatever the thread timing.
     * Dropout masks come from a counter-based hash (rng.h) of a
     * 64-bit key and the element index, so any backend draws the same mask
     * with no state and the backward pass regenerates it instead of storing
     * it. */

    /* Sets `bytes` of backend memory to zero. */
    int (*zero)(backend *be, void *p, size_t bytes);
    /* x(n) *= s. */
    int (*scale)(backend *be, float *x, size_t n, float s);
    /* out[0] (backend memory) = sum of x[i]^2 over n elements, summed in
     * double in a fixed order. */
    int (*sumsq)(backend *be, float *out, const float *x, size_t n);
    /* Backward of linear, out(R,N) = in(R,K) · W(N,K)ᵀ + b(N):
     * din(R,K) = dout · W (added to din when accumulate_din, else written),
     * dW(N,K) += doutᵀ · in, db(N) += column sums of dout. din and db may
     * be NULL. */
    int (*linear_backward)(backend *be, float *din, float *dW, float *db, const float *dout,
                           const float *in, const float *W, int R, int K, int N,
                           int accumulate_din);
    /* Backward of layernorm from its input `in` (R,C) and the mean/rstd (R)
     * the forward saved: din(R,C) written, dw, db (C) +=. din may alias
     * dout. */
    int (*layernorm_backward)(backend *be, float *din, float *dw, float *db, const float *dout,
                              const float *in, const float *mean, const float *rstd, const float *w,
                              int R, int C);
    /* din = dout * gelu'(in), exact erf GELU. din may alias dout. */
    int (*gelu_backward)(backend *be, float *din, const float *dout, const float *in, size_t n);
    /* din = dout * (1 - out^2), where out = tanh(in) from the forward. */
    int (*tanh_backward)(backend *be, float *din, const float *dout, const float *out, size_t n);
    /* Inverted dropout: out[i] = in[i] / (1 - p) when element i is kept
     * (dropout_keep(key, i, p)), else 0. p == 0 copies. out may alias in.
     * The backward is the same call on the gradient with the same key. */
    int (*dropout)(backend *be, float *out, const float *in, size_t n, float p,
                   unsigned long long key);
    /* attention with dropout on the probabilities: att(B,H,T,T) keeps the
     * softmax probabilities (as attention does), and its rows i >=
     * lengths[b] (padding queries) are written 0; with p > 0 the output
     * uses them dropped (element index (b,h,i,j) of att, key), written to
     * the scratch att_drop(B,H,T,T), which may be NULL when p == 0. */
    int (*attention_train)(backend *be, float *out, float *att, float *att_drop, const float *qkv,
                           const int *lengths, int B, int T, int H, int d, float scale, float p,
                           unsigned long long key);
    /* Backward of attention_train: dqkv(B,T,3C) written (padding rows 0)
     * from dout(B,T,C), the saved probabilities att and qkv; datt and
     * att_drop (B,H,T,T) are scratch (att_drop unused when p == 0). */
    int (*attention_backward)(backend *be, float *dqkv, float *datt, float *att_drop,
                              const float *dout, const float *att, const float *qkv,
                              const int *lengths, int B, int T, int H, int d, float scale, float p,
                              unsigned long long key);
    /* Backward of embed: dword, dpos, dtype (and dtask when non-NULL) +=
     * the rows of dout(B,T,C) scattered by id, position and type. */
    int (*embed_backward)(backend *be, float *dword, float *dpos, float *dtype, float *dtask,
                          const float *dout, const int *ids, const int *types, int B, int T, int C,
                          int pos_offset);
    /* Backward of gather_cls: dx(B,T,C) = 0 except dx[b,0,:] = dcls[b,:]. */
    int (*scatter_cls)(backend *be, float *dx, const float *dcls, int B, int T, int C);
    /* Softmax cross-entropy: probs(B,K) = softmax(logits(B,K)),
     * losses(B) = -log probs[b, labels[b]]; labels is backend int memory. */
    int (*cross_entropy)(backend *be, float *losses, float *probs, const float *logits,
                         const int *labels, int B, int K);
    /* dlogits(B,K) = scale * (probs - onehot(labels)), written. */
    int (*cross_entropy_backward)(backend *be, float *dlogits, const float *probs,
                                  const int *labels, int B, int K, float scale);
    /* Distillation loss on logits z(B,K) against targets q(B,K) (each row
     * a distribution: the teacher's at temperature T) and labels (-1: none):
     * probs = softmax(z), probs_t = softmax(z / T),
     * losses[b] = (1 - alpha) * -log probs[b, labels[b]] (0 when the label
     *             is -1) + alpha * T^2 * KL(q_b || probs_t_b). */
    int (*distill_loss)(backend *be, float *losses, float *probs, float *probs_t,
                        const float *logits, const int *labels, const float *q, int B, int K,
                        float T, float alpha);
    /* Its gradient, written: dlogits(B,K) = scale * ((1 - alpha) *
     * (probs - onehot(labels)) + alpha * T * (probs_t - q)), the first term
     * 0 on rows whose label is -1. */
    int (*distill_backward)(backend *be, float *dlogits, const float *probs, const float *probs_t,
                            const int *labels, const float *q, int B, int K, float T, float alpha,
                            float scale);
    /* One AdamW step (t >= 1) on n elements, as torch.optim.AdamW:
     * p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). */
    int (*adamw)(backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, int t);
    /* The optimizer's whole step, fused, on each run of `runs` (ranges of
     * the arenas of `total` floats): when coef != 1 (gradient clipping; 1:
     * none) the run's gradients are multiplied by coef first and written
     * back, then the adamw step above runs on them, with weight_decay where
     * run.decay, at learning rate lr, or head_lr where run.head. Floats
     * outside the runs (parameters, gradients and moments) are left alone.
     * The multiply-adds may be fused (FMA) or not, so backends agree within
     * rounding, not bit for bit. */
    int (*adamw_step)(backend *be, float *params, float *grads, float *m, float *v,
                      const backend_adamw_run *runs, int n_runs, size_t total, float coef, float lr,
                      float head_lr, float beta1, float beta2, float eps, float weight_decay,
                      int t);

    /* ---- lanes: independent passes side by side -------------------------
     * A backend whose best way to run independent passes (the sequences of
     * one batch, or several batches) is one single-threaded copy of itself
     * per core says how many such lanes it has, and makes them; model code
     * then runs one pass per lane on the thread pool (thread_pool.h), with
     * no barrier inside a pass. A backend with one queue of work (a GPU)
     * says 1 and makes none. */
    int (*lanes)(const backend *be);
    /* A new single-lane backend of the same kind; destroy it with its
     * destroy. SM_ERR_UNSUPPORTED where lanes() is 1. */
    int (*lane_create)(backend *be, backend **out, char *err);

    /* ---- masked-language-model pretraining (CPU: cpu/mlm_ops.c) ----
     * The vocabulary-sized decoder runs only on the predicted positions:
     * their rows are gathered, and the gradient scattered back. */

    /* out(M,C) = x[rows[i], :]; rows (M) is backend int memory. */
    int (*gather_rows)(backend *be, float *out, const float *x, const int *rows, int M, int C);
    /* Backward of gather_rows for distinct rows: dx(N,C) = 0 except
     * dx[rows[i], :] = dout[i, :] (written). */
    int (*scatter_rows)(backend *be, float *dx, const float *dout, const int *rows, int M, int N,
                        int C);

    /* ---- reduced precision, inference only (see the conventions) -------
     * Optional, as a pair (NULL: the backend packs nothing). */
    /* Packs W(N,K) (row-major FP32 in this backend's memory, i.e. host
     * memory on the CPU: the model's parameters) once as `kind`
     * (backend_pack_kind) into *out, freed with
     * backend_packed_free. SM_ERR_UNSUPPORTED (with the reason in err) when
     * the backend lacks that kind, SM_ERR_INVALID for a shape out of range
     * or weights the kind cannot hold (INT8: non-finite), SM_ERR_NOMEM. The
     * CPU packs every kind on any x86-64; backend_cpu_pack_native
     * (cpu/backend_cpu.h) says which this CPU runs with its own
     * instructions (AVX512-BF16, AVX512-VNNI, AVX-512F); the others run in
     * plain C, the same bits for INT8 and F32, slowly. The CUDA backend
     * packs BF16 only, on its device; its packed weight is usable by any
     * backend of that device. */
    int (*pack_weight)(backend *be, int kind, const float *W, int N, int K, backend_packed **out,
                       char *err);
    /* out(R,N) = in(R,K) · Wᵀ + b with W(N,K) packed (as its kind says,
     * above); b may be NULL. SM_ERR_INVALID (nothing written) when K and N
     * are not W's or W was not packed by a backend of this kind. */
    int (*linear_packed)(backend *be, float *out, const float *in, const backend_packed *W,
                         const float *b, int R, int K, int N);
    /* Optional (NULL: 0). The packed kind a model's linear layers should run
     * with on this backend at its current precision, 0 for FP32 weights as
     * they are (linear). A GPU in bf16: BACKEND_PACK_BF16, whose
     * linear_packed computes what its linear does with the weights
     * converted once. The CPU: its precision's kind (bf16, int8); for fp32
     * packed FP32 where that beats its BLAS; for auto INT8 where the CPU
     * runs it natively and int8_ok says the model's labels under INT8 were
     * checked, else fp32's. Callers pack once per model and kind and run
     * linear_packed. */
    int (*linear_pack_kind)(const backend *be, int int8_ok);

    /* ---- what a caller sizes and keys by (optional: NULL = none) -------- */
    /* The device memory the backend's own scratch may grow to during one
     * forward pass of a BERT-shaped encoder over batch x seq tokens
     * (hidden, ffn and heads as the model's config), beyond the activations
     * of the workspace (bert_workspace_bytes): what a caller adds when it
     * fits a batch into free memory (mem_info). NULL: none (the CPU's
     * scratch is host memory). */
    size_t (*forward_scratch_bytes)(const backend *be, int batch, int seq, int hidden, int ffn,
                                    int heads);
    /* The most token rows one forward pass should hold when each row has
     * row_bytes of activations (>= 1): the encoder runs a larger batch as
     * several passes of whole sequences, one after another on the same
     * workspace, so that a pass's activations stay in the caches. Every op
     * is per row or per sequence, so packed weights give the same bits; an
     * unpacked product (a BLAS sgemm) may round differently with the
     * number of rows, as it does when lanes split a batch. NULL: no bound
     * (a GPU wants whole batches). */
    int (*pass_rows)(const backend *be, size_t row_bytes);
    /* Which memory the backend computes on: -1 host memory (the CPU), else
     * the index of its device; backends with the same index read each
     * other's memory, so a model's weights uploaded once serve them all. */
    int (*device_index)(const backend *be);
};

#endif
