/* cpu_ctx.h: the CPU backend's state and its thread-count rules, shared by
 * the files that fill its table (backend_cpu.c, train_ops.c,
 * attention_train_ops.c, mlm_ops.c). Private to cpu/: the ops
 * read the state here instead of calling back into backend_cpu.c.
 */
#ifndef SM_CPU_CTX_H
#define SM_CPU_CTX_H

#include "core/backend.h"

/* The precision a CPU backend was set to (set_precision): which weights its
 * linear layers run (linear_pack_kind). */
enum cpu_precision { CPU_PREC_AUTO = 0, CPU_PREC_FP32, CPU_PREC_BF16, CPU_PREC_INT8 };

typedef struct cpu_ctx {
    int threads;   /* what each op splits its work over (thread_pool.h) */
    int precision; /* enum cpu_precision */
} cpu_ctx;

/* Below these sizes an op runs on one thread: waking and joining workers
 * costs more than it saves, and on a busy machine each join can wait a
 * whole scheduler time slice for a descheduled thread. The product's bound
 * was 2^23 multiply-adds, which left every linear layer of the built-in
 * model at batch 1 (80 rows: 1.4 to 5.4 million) on one thread: 2^20
 * splits them, and two threads then ran the built-in shape at batch 1 at
 * 1,515 sequences/s instead of 1,016 (one thread 900; batch 32 unchanged;
 * bench_encoder, real lengths, bench/RESULTS.md). Elementwise ops stay at
 * 2^16: 2^14 measured slower. */
#define PARALLEL_MIN_MACS (1 << 20)     /* multiply-adds of a product */
#define PARALLEL_MIN_ELEMENTS (1 << 16) /* elements of an elementwise op */

/* The activations one forward pass (per lane) should hold (pass_rows): a
 * batch of 32 sequences of 128 tokens has 28 MiB of them on the built-in
 * shape and 150 MiB on BERT-base, beyond the 32 MiB L3 where they went
 * to memory and back between every two ops; passes of about 8 MiB ran the
 * built-in shape's INT8 45% faster (778 -> 1,125 sequences/s), its FP32
 * 10%, e5-small's INT8 18% and BERT-base's 8%, FP32 of the 384- and
 * 768-wide shapes unchanged (bench_encoder, one thread, bench/RESULTS.md). */
#define PASS_BYTES (8u << 20)

static inline int cpu_threads(const backend *be)
{
    return ((const cpu_ctx *)be->ctx)->threads;
}

/* Threads for a product of `macs` multiply-adds: 1 for small ones. */
static inline int cpu_threads_for(const backend *be, double macs)
{
    return macs < PARALLEL_MIN_MACS ? 1 : cpu_threads(be);
}

/* Threads for an elementwise op over n elements: 1 for small ones. */
static inline int cpu_threads_for_elements(const backend *be, double n)
{
    return n < PARALLEL_MIN_ELEMENTS ? 1 : cpu_threads(be);
}

#endif
