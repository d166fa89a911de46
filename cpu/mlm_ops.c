/* mlm_ops.c: the CPU versions of the pretraining ops of backend.h:
 * gathering the rows of the predicted positions before the vocabulary-sized
 * decoder, and scattering their gradient back. Each output row is written by
 * one thread, so the result does not depend on the thread count.
 * backend_cpu_init_mlm_ops() fills the table.
 */
#include "core/backend.h"
#include "cpu/cpu_ctx.h"

#include <string.h>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "cpu/train_kernels.h"

static int nthreads(const backend *be, size_t work)
{
    return work < 32768 ? 1 : cpu_threads(be);
}

typedef struct gather_job {
    float *out;
    const float *x;
    const int *rows;
    int C;
} gather_job;

static void gather_range(void *ctx, int lo, int hi)
{
    const gather_job *j = ctx;
    for (int i = lo; i < hi; i++)
        memcpy(j->out + (size_t)i * j->C, j->x + (size_t)j->rows[i] * j->C,
               (size_t)j->C * sizeof *j->out);
}

static int cpu_gather_rows(backend *be, float *out, const float *x, const int *rows, int M, int C)
{
    gather_job j = {out, x, rows, C};
    tp_for_static(nthreads(be, (size_t)M * C), M, gather_range, &j);
    return SM_OK;
}

static int cpu_scatter_rows(backend *be, float *dx, const float *dout, const int *rows, int M,
                            int N, int C)
{
    (void)be;
    memset(dx, 0, (size_t)N * C * sizeof *dx);
    /* In order, adding: repeated rows would sum (the op promises only
     * distinct rows, which a GPU writes without atomics). */
    for (int i = 0; i < M; i++) {
        float *d = dx + (size_t)rows[i] * C;
        const float *g = dout + (size_t)i * C;
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
    return SM_OK;
}

void backend_cpu_init_mlm_ops(backend *be)
{
    be->gather_rows = cpu_gather_rows;
    be->scatter_rows = cpu_scatter_rows;
}
