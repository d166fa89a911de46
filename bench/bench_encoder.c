/* bench_encoder.c: encoder forward speed against the machine's sgemm rate.
 *
 * Builds a random-weight model of the given shape, runs the forward pass on
 * batches of fixed length (--seq) or of real review lengths (--lengths FILE:
 * a TSV whose last column is text; lengths in code points + 2, capped at
 * --seq, batches sorted by length as classify does), and prints sequences/s
 * and the GFLOP/s reached next to what cblas_sgemm reaches on the same
 * matrix shapes with the same thread count, in the same run. Median of
 * --runs timings. --precision bf16 runs the encoder's linear layers with
 * BF16 weights (a CPU with AVX512-BF16), int8 with INT8 weights and inputs
 * (a CPU with AVX512-VNNI; the matrices bert_pack_plan packs), fp32-packed
 * with FP32 weights packed once (cpu/gemm_f32.h), all through bert_params_pack;
 * fp32-sgemm with the FP32 weights through OpenBLAS; fp32 (default) as
 * shipped: fp32-packed on a CPU with AVX-512F, else fp32-sgemm
 * (backend_cpu_fp32_packed). Not a test: it asserts nothing.
 *
 *   build/bench/bench_encoder --layers 12 --hidden 768 --heads 12 \
 *       --intermediate 3072 --batch 32 --seq 128 --threads 2 [--precision bf16|int8]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "cpu/backend_cpu.h"
#include "cpu/blas.h"
#include "encoder/bert.h"

/* by bert_precision */
static const char *const k_precision[] = {"fp32-sgemm", "bf16", "int8", "fp32-packed"};

typedef struct options {
    int layers, hidden, heads, intermediate, batch, seq, threads, runs, lanes;
    const char *lengths;
    bert_precision precision; /* --precision fp32|fp32-sgemm|fp32-packed|bf16|int8 */
} options;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The timed batches: batch bi on lane `lane` (one batch at a time each). */
typedef struct batches_job {
    const bert_config *cfg;
    const bert_params *p;
    bert_workspace **lane_ws;
    const int *ids, *lens;
    int n_seq, batch;
    float *lane_logits;
    int failed; /* set by a failing batch, never cleared */
} batches_job;

static void run_batch(void *ctx, int bi, int lane)
{
    batches_job *j = ctx;
    int first = bi * j->batch;
    int B = j->n_seq - first < j->batch ? j->n_seq - first : j->batch;
    if (bert_forward(j->cfg, j->p, j->lane_ws[lane], j->ids, j->lens + first, B,
                     j->lens[first + B - 1],
                     j->lane_logits + (size_t)lane * j->batch * j->cfg->num_labels, NULL,
                     NULL) != SM_OK)
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_state;
static float frand(void)
{
    return (float)((rng_next(&rng_state) >> 40) * (1.0 / (1 << 24))) - 0.5f;
}

/* Forward FLOPs of one sequence of T tokens (matrix products only). */
static double flops_per_sequence(const options *o, int T)
{
    double C = o->hidden, F = o->intermediate;
    double linear = 2.0 * T * (4 * C * C + 2 * C * F);
    double attention = 2.0 * 2.0 * T * T * C;
    return o->layers * (linear + attention) + 2.0 * C * C;
}

/* GFLOP/s of cblas_sgemm on the encoder's four linear shapes, M = rows. */
static double sgemm_rate(const options *o, int rows)
{
    int C = o->hidden, F = o->intermediate;
    int shapes[4][2] = {{3 * C, C}, {C, C}, {F, C}, {C, F}};
    size_t maxel = (size_t)rows * (F > 3 * C ? F : 3 * C);
    float *A = malloc(maxel * sizeof *A), *W = malloc((size_t)F * 3 * C * sizeof *W),
          *out = malloc(maxel * sizeof *out);
    for (size_t i = 0; i < maxel; i++) A[i] = frand();
    for (size_t i = 0; i < (size_t)F * 3 * C; i++) W[i] = frand();
    blas_set_threads(o->threads);
    double times[16];
    double flops = 0;
    for (int s = 0; s < 4; s++) flops += 2.0 * rows * shapes[s][0] * shapes[s][1];
    for (int r = 0; r < o->runs; r++) {
        double t0 = now();
        for (int s = 0; s < 4; s++)
            blas_sgemm(0, 1, rows, shapes[s][0], shapes[s][1],
                        1.0f, A, shapes[s][1], W, shapes[s][1], 0.0f, out, shapes[s][0]);
        times[r] = now() - t0;
    }
    free(A);
    free(W);
    free(out);
    return flops / median(times, o->runs) / 1e9;
}

/* Token counts of real reviews: code points of the last TSV column + 2. */
static int *read_lengths(const char *path, int cap, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "bench_encoder: cannot open %s\n", path);
        return NULL;
    }
    int *len = NULL, used = 0, alloc = 0;
    char line[1 << 16];
    int first = 1;
    while (fgets(line, sizeof line, f)) {
        if (first) { /* header */
            first = 0;
            continue;
        }
        char *text = strrchr(line, '\t');
        text = text ? text + 1 : line;
        int cps = 0;
        for (char *c = text; *c && *c != '\n'; c++) cps += ((unsigned char)*c & 0xC0) != 0x80;
        if (used == alloc) {
            alloc = alloc ? alloc * 2 : 1024;
            len = realloc(len, (size_t)alloc * sizeof *len);
        }
        len[used++] = cps + 2 > cap ? cap : cps + 2;
    }
    fclose(f);
    *n = used;
    return len;
}

/* What the extension runs for fp32 on this CPU (backend_cpu_fp32_packed). */
static bert_precision fp32_shipped(void)
{
    return backend_cpu_fp32_packed() ? BERT_FP32_PACKED : BERT_FP32;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){4, 312, 12, 1248, 32, 128, 2, 5, 0, NULL, fp32_shipped()};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *target = !strcmp(a, "--layers") ? &o->layers
                    : !strcmp(a, "--hidden") ? &o->hidden
                    : !strcmp(a, "--heads") ? &o->heads
                    : !strcmp(a, "--intermediate") ? &o->intermediate
                    : !strcmp(a, "--batch") ? &o->batch
                    : !strcmp(a, "--seq") ? &o->seq
                    : !strcmp(a, "--threads") ? &o->threads
                    : !strcmp(a, "--runs") ? &o->runs
                    : !strcmp(a, "--lanes") ? &o->lanes : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--lengths")) o->lengths = v;
        else if (!strcmp(a, "--precision") &&
                 (!strcmp(v, "fp32") || !strcmp(v, "fp32-sgemm") || !strcmp(v, "fp32-packed") ||
                  !strcmp(v, "bf16") || !strcmp(v, "int8")))
            o->precision = !strcmp(v, "bf16")          ? BERT_BF16
                           : !strcmp(v, "int8")        ? BERT_INT8
                           : !strcmp(v, "fp32-sgemm")  ? BERT_FP32
                           : !strcmp(v, "fp32-packed") ? BERT_FP32_PACKED
                                                       : fp32_shipped();
        else if (target && atoi(v) >= 0) *target = atoi(v);
        else goto usage;
        i++;
    }
    if (o->runs > 16) o->runs = 16;
    return 0;
usage:
    fprintf(stderr, "usage: bench_encoder [--layers N] [--hidden N] [--heads N] [--intermediate N]\n"
                    "       [--batch N] [--seq N] [--threads N] [--runs N] [--lengths reviews.tsv]\n"
                    "       [--lanes 1: whole batches concurrently, one per thread, as classify does]\n"
                    "       [--precision fp32|fp32-sgemm|fp32-packed|bf16|int8]\n");
    return 1;
}

int main(int argc, char **argv)
{
    options o;
    char err[SM_ERR_MAX];
    if (parse_args(argc, argv, &o)) return 2;

    bert_config cfg;
    bert_config_init(&cfg);
    cfg.vocab_size = 8000;
    cfg.hidden_size = o.hidden;
    cfg.num_hidden_layers = o.layers;
    cfg.num_attention_heads = o.heads;
    cfg.intermediate_size = o.intermediate;
    cfg.max_position_embeddings = o.seq > 512 ? o.seq : 512;
    bert_param_spec *specs;
    int n_specs;
    size_t total;
    bert_params p;
    if (bert_param_table(&cfg, 1, &specs, &n_specs, &total, err)) goto fail;
    float *arena = malloc(total * sizeof *arena);
    for (size_t i = 0; i < total; i++) arena[i] = frand() * 0.1f;
    if (bert_params_bind(&cfg, 1, arena, &p, err)) goto fail;
    const bert_params *run_p = &p;
    bert_packed_params *bp = NULL;
    double t_pack = 0;
    if (o.precision == BERT_BF16 && !backend_cpu_pack_native(BACKEND_PACK_BF16)) {
        snprintf(err, sizeof err, "--precision bf16: this CPU has no AVX512-BF16");
        goto fail;
    }
    if (o.precision == BERT_INT8 && !backend_cpu_pack_native(BACKEND_PACK_INT8)) {
        snprintf(err, sizeof err, "--precision int8: this CPU has no AVX512-VNNI");
        goto fail;
    }

    /* Batches: fixed length, or real lengths sorted as classify sorts them. */
    int n_seq = o.batch, *lens = NULL;
    if (o.lengths) {
        lens = read_lengths(o.lengths, o.seq, &n_seq);
        if (!lens) return 1;
        qsort(lens, (size_t)n_seq, sizeof *lens, cmp_int);
    } else {
        lens = malloc((size_t)n_seq * sizeof *lens);
        for (int i = 0; i < n_seq; i++) lens[i] = o.seq;
    }

    if (blas_load(err)) goto fail;
    double sgemm = sgemm_rate(&o, o.batch * o.seq);
    backend *be;
    if (backend_cpu_create(o.threads, &be, err)) goto fail;
    if (o.precision != BERT_FP32) {
        bert_precision plan[BERT_PACK_N];
        bert_pack_plan(o.precision, plan);
        double t0 = now();
        if (bert_params_pack(be, &cfg, &p, plan, &bp, err)) goto fail;
        t_pack = now() - t0;
        run_p = &bp->p;
    }
    bert_workspace *ws;
    if (bert_workspace_create(be, &cfg, o.batch, o.seq, &ws, err)) goto fail;
    int *ids = malloc((size_t)o.batch * o.seq * sizeof *ids);
    float *logits = malloc((size_t)o.batch * cfg.num_labels * sizeof *logits);
    for (int i = 0; i < o.batch * o.seq; i++) ids[i] = 5 + i % 7000;

    double times[16], flops = 0;
    int n_batches = (n_seq + o.batch - 1) / o.batch;
    int lanes = o.lanes && o.threads > 1 ? (o.threads < n_batches ? o.threads : n_batches) : 1;
    bert_workspace **lane_ws = &ws;
    if (lanes > 1 && bert_workspace_lanes(ws, &cfg, lanes, &lane_ws, err)) goto fail;
    float *lane_logits = malloc((size_t)lanes * o.batch * cfg.num_labels * sizeof *lane_logits);
    batches_job job = {&cfg, run_p, lane_ws, ids, lens, n_seq, o.batch, lane_logits, 0};
    for (int r = 0; r < o.runs; r++) {
        double t0 = now();
        tp_for_dynamic(lanes, n_batches, run_batch, &job);
        if (job.failed) goto fail;
        times[r] = now() - t0;
    }
    free(lane_logits);
    flops = 0;
    for (int first = 0; first < n_seq; first += o.batch) {
        int B = n_seq - first < o.batch ? n_seq - first : o.batch;
        flops += B * flops_per_sequence(&o, lens[first + B - 1]);
    }
    double t = median(times, o.runs);
    double rate = flops / t / 1e9;
    printf("%s\n", blas_describe());
    printf("shape L=%d C=%d H=%d F=%d  batch %d  %s  threads %d%s  precision %s\n", o.layers,
           o.hidden, o.heads, o.intermediate, o.batch, o.lengths ? "real lengths" : "fixed length",
           o.threads, lanes > 1 ? " (one batch per thread)" : " (threads within each op)",
           k_precision[o.precision]);
    if (bp) printf("  %s weights packed in %.1f ms\n", k_precision[o.precision], t_pack * 1e3);
    printf("  sequences: %d, max seq %d, median of %d runs: %.3f s\n", n_seq, o.seq, o.runs, t);
    printf("  %.1f sequences/s   encoder %.1f GFLOP/s   sgemm %.1f GFLOP/s   ratio %.0f%%\n",
           n_seq / t, rate, sgemm, 100.0 * rate / sgemm);
    free(ids);
    free(logits);
    free(lens);
    bert_workspace_free(ws);
    be->destroy(be);
    bert_packed_params_free(bp);
    bert_params_release(&p);
    free(arena);
    free(specs);
    bert_config_free(&cfg);
    return 0;
fail:
    fprintf(stderr, "bench_encoder: %s\n", err);
    return 1;
}
