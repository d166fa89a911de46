/* bench_cuda.c: the CUDA backend's speed on a BERT-base-shaped encoder
 * (12 layers, hidden 768, 12 heads, FFN 3072, random weights, 21128-token
 * vocabulary) at sequence length 128 with no padding: inference
 * sequences/s at batch 1, 32 and 256 (bert_forward, logits copied back),
 * fine-tuning examples/s at batch 32 (forward with dropout, backward, AdamW
 * with clipping), in bf16 (inference with the encoder's matrices packed as
 * BF16 once, as the extension runs it) and fp32, and the model's FLOP rate as a fraction
 * of the rate cuBLAS itself reaches on an 8192^3 product in that precision.
 *
 *   build/bench/bench_cuda [--seconds S] [--precisions bf16,fp32] [--device N]
 *   build/bench/bench_cuda --dry-run     the same code on the CPU backend with a
 *                                        2-layer model (checks the benchmark itself)
 *
 * The plugin is $SENTIMENT_CUDA_PLUGIN or build/sentiment_cuda.so. Without a
 * GPU it prints "skipped: no CUDA device (...)" and exits 0. Each figure is
 * the mean over at least S seconds (default 1) after two warm-up runs.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"
#include "train/bert_train.h"
#include "train/optimizer.h"
#include "train/trainer.h"

#include "gpu/sentiment_cuda.h"

#define SEQ 128

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static struct {
    sentiment_cuda_backend_create_fn create;
} P;

static int fail(backend *be, const char *what, const char *err)
{
    const char *more = be ? be->last_error(be) : "";
    fprintf(stderr, "bench_cuda: %s: %s%s%s\n", what, err, *more ? " / " : "", more);
    return 1;
}

/* Forward FLOPs of one sequence of T tokens (matrix products only). */
static double forward_flops(const bert_config *cfg, int T)
{
    double C = cfg->hidden_size, F = cfg->intermediate_size;
    double per_layer = 2.0 * T * (4 * C * C + 2 * C * F) + 4.0 * T * T * C;
    return cfg->num_hidden_layers * per_layer + 2.0 * C * C + 2.0 * C * cfg->num_labels;
}

typedef struct row {
    const char *prec, *what;
    int batch;
    double ms, per_sec, tflops, frac;
    const char *unit;
} row;

static row g_rows[32];
static int g_n;

static void add_row(const char *prec, const char *what, int batch, double ms, double per_sec,
                    const char *unit, double tflops, double peak)
{
    if (g_n >= 32) return;
    g_rows[g_n++] = (row){prec, what, batch, ms, per_sec, tflops, peak > 0 ? tflops / peak : 0,
                          unit};
    printf("  %-5s %-12s batch %3d: %9.3f ms, %9.0f %s, %6.1f TFLOP/s\n", prec, what, batch, ms,
           per_sec, unit, tflops);
    fflush(stdout);
}

static int bench_inference(backend *be, const bert_model *m, const bert_params *p,
                           const char *prec, int B, double seconds, double peak)
{
    char err[SM_ERR_MAX] = "";
    bert_workspace *ws;
    if (bert_workspace_create(be, &m->cfg, B, SEQ, &ws, err)) return fail(be, "workspace", err);
    int *ids = malloc((size_t)B * SEQ * sizeof *ids), *lengths = malloc(B * sizeof *lengths);
    float *logits = malloc((size_t)B * m->cfg.num_labels * sizeof *logits);
    uint64_t s = 12345;
    for (int i = 0; i < B * SEQ; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 5 + (int)((s >> 33) % (uint64_t)(m->cfg.vocab_size - 5));
    }
    for (int b = 0; b < B; b++) lengths[b] = SEQ;
    int rc = 0, runs = 0;
    double t0 = 0;
    for (int it = -2;; it++) {
        if (it == 0) t0 = now();
        if (bert_forward(&m->cfg, p, ws, ids, lengths, B, SEQ, logits, NULL, err)) {
            rc = fail(be, "forward", err);
            break;
        }
        if (it >= 0) runs++;
        if (it >= 2 && now() - t0 >= seconds) break;
    }
    if (!rc) {
        for (int i = 0; i < B * m->cfg.num_labels; i++)
            if (!isfinite(logits[i])) {
                rc = fail(be, "forward", "a logit is not finite");
                break;
            }
    }
    if (!rc) {
        double dt = (now() - t0) / runs;
        double tf = forward_flops(&m->cfg, SEQ) * B / dt / 1e12;
        add_row(prec, "inference", B, dt * 1e3, B / dt, "seq/s", tf, peak);
    }
    bert_workspace_free(ws);
    free(ids);
    free(lengths);
    free(logits);
    return rc;
}

static int bench_training(backend *be, const bert_model *m, const char *prec, int B,
                          double seconds, double peak)
{
    char err[SM_ERR_MAX] = "";
    size_t bytes = m->n_floats * sizeof(float);
    float *params = be->alloc(be, bytes), *grads = be->alloc(be, bytes);
    bert_params p = {0}, g = {0};
    adamw *opt = NULL;
    bert_train_ws *ws = NULL;
    int rc = 0;
    int *ids = malloc((size_t)B * SEQ * sizeof *ids), *lengths = malloc(B * sizeof *lengths),
        *labels = malloc(B * sizeof *labels);
    if (!params || !grads) {
        rc = fail(be, "training parameters", "out of device memory");
        goto end;
    }
    if (be->upload(be, params, m->arena, bytes) ||
        bert_params_bind(&m->cfg, 1, params, &p, err) ||
        bert_params_bind(&m->cfg, 1, grads, &g, err) ||
        adamw_create(be, &m->cfg, 1, &opt, err) ||
        bert_train_ws_create(be, &m->cfg, B, SEQ, &ws, err)) {
        rc = fail(be, "training setup", err);
        goto end;
    }
    uint64_t s = 777;
    for (int i = 0; i < B * SEQ; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 5 + (int)((s >> 33) % (uint64_t)(m->cfg.vocab_size - 5));
    }
    for (int b = 0; b < B; b++) {
        lengths[b] = SEQ;
        labels[b] = b % m->cfg.num_labels;
    }
    adamw_hparams h;
    adamw_hparams_default(&h);
    bert_dropout drop;
    bert_dropout_from_config(&m->cfg, -1, 42, &drop);
    double t0 = 0, loss = 0;
    int runs = 0;
    for (int it = -2;; it++) {
        if (it == 0) t0 = now();
        drop.step = (uint64_t)(it + 2);
        float norm;
        if (be->zero(be, grads, bytes) ||
            bert_train_forward(&m->cfg, &p, ws, ids, lengths, labels, B, SEQ, &drop, &loss, NULL,
                               err) ||
            bert_train_backward(&m->cfg, &p, &g, ws, 1.0f / B, err) ||
            adamw_step(opt, params, grads, &h, h.lr, &norm, err)) {
            rc = fail(be, "training step", err[0] ? err : "a backend op failed");
            goto end;
        }
        if (it >= 0) runs++;
        if (it >= 2 && now() - t0 >= seconds) break;
    }
    if (!isfinite(loss)) {
        rc = fail(be, "training", "the loss is not finite");
        goto end;
    }
    double dt = (now() - t0) / runs;
    double tf = 3.0 * forward_flops(&m->cfg, SEQ) * B / dt / 1e12;
    add_row(prec, "fine-tuning", B, dt * 1e3, B / dt, "ex/s ", tf, peak);
end:
    bert_train_ws_free(ws);
    adamw_free(opt);
    bert_params_release(&p);
    bert_params_release(&g);
    if (params) be->free(be, params);
    if (grads) be->free(be, grads);
    free(ids);
    free(lengths);
    free(labels);
    return rc;
}

static bert_model *bert_base(int small, char *err)
{
    size_t cap = 21128 * 12, len = 0;
    char *vocab = malloc(cap);
    if (!vocab) return NULL;
    len += (size_t)sprintf(vocab, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n");
    for (int i = 5; i < 21128; i++) len += (size_t)sprintf(vocab + len, "t%d\n", i);
    bert_shape shape = {12, 768, 12, 3072, 512};
    if (small) shape = (bert_shape){2, 128, 2, 512, 512};
    const char *labels[] = {"negative", "positive"};
    bert_model *m = NULL;
    int rc = bert_model_create_scratch(&shape, vocab, len, 1, 2, labels, 1, &m, err);
    free(vocab);
    return rc ? NULL : m;
}

int main(int argc, char **argv)
{
    double seconds = 1.0;
    int device = 0, dry = 0;
    char precisions[64] = "bf16,fp32";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dry-run")) dry = 1;
        else if (!strcmp(argv[i], "--precisions") && i + 1 < argc)
            snprintf(precisions, sizeof precisions, "%s", argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s [--seconds S] [--precisions bf16,fp32] [--device N] [--dry-run]\n",
                    argv[0]);
            return 2;
        }
    }
    char err[SM_ERR_MAX] = "", desc[256] = "", device_desc[256];
    backend *be = NULL;
    int rc;
    if (dry) {
        if ((rc = backend_cpu_create(2, &be, err))) return fail(NULL, "the CPU backend", err);
        snprintf(desc, sizeof desc, "cpu (dry run)");
        snprintf(precisions, sizeof precisions, "cpu");
        seconds = seconds < 0.2 ? seconds : 0.2;
    } else {
        const char *path = getenv("SENTIMENT_CUDA_PLUGIN");
        if (!path || !*path) path = "build/sentiment_cuda.so";
        if (access(path, R_OK)) {
            printf("bench_cuda: skipped: no CUDA device (the CUDA plugin %s was not built)\n", path);
            return 0;
        }
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "bench_cuda: cannot load %s: %s\n", path, dlerror());
            return 1;
        }
        *(void **)&P.create = dlsym(h, "sentiment_cuda_backend_create");
        if (!P.create) {
            fprintf(stderr, "bench_cuda: %s lacks sentiment_cuda_backend_create\n", path);
            return 1;
        }
        rc = P.create(device, &be, desc, sizeof desc, err);
        if (rc == SM_ERR_DEVICE && !strncmp(err, "no CUDA device: ", 16)) {
            printf("bench_cuda: skipped: no CUDA device (%s)\n", err + 16);
            return 0;
        }
        if (rc) return fail(NULL, "creating the CUDA backend", err);
    }
    snprintf(device_desc, sizeof device_desc, "%s", desc);
    char *comma = strrchr(device_desc, ',');
    if (comma) *comma = 0; /* "cuda:0 NVIDIA H200" */

    double t = now();
    bert_model *m = bert_base(dry, err);
    if (!m) return fail(NULL, "building the model", err);
    bert_device_params *dp = NULL;
    if (bert_params_to_backend(be, m, &dp, err)) return fail(be, "uploading the model", err);
    size_t fr = 0, tot = 0;
    if (!dry) be->mem_info(be, &fr, &tot);
    printf("bench_cuda: %s; BERT-base shape (%d layers, hidden %d, %d heads, FFN %d), %zu "
           "parameters, seq %d; set up in %.1f s; %.1f of %.1f GiB free\n",
           device_desc, m->cfg.num_hidden_layers, m->cfg.hidden_size, m->cfg.num_attention_heads,
           m->cfg.intermediate_size, bert_model_num_params(m), SEQ, now() - t, fr / 1073741824.0,
           tot / 1073741824.0);
    fflush(stdout);

    double peaks[8] = {0};
    const char *names[8];
    int n_prec = 0;
    for (char *tok = strtok(precisions, ","); tok && n_prec < 8; tok = strtok(NULL, ",")) {
        const char *prec = tok;
        names[n_prec] = prec;
        double peak = 0;
        if (!dry) {
            if (be->set_precision(be, prec, err)) return fail(be, "precision", err);
            be->describe(be, desc, sizeof desc);
            if (!be->gemm_tflops) return fail(be, "cuBLAS rate", "the backend has no gemm_tflops");
            if (be->gemm_tflops(be, 8192, 8192, 8192, 10, &peak, err))
                return fail(be, "cuBLAS rate", err);
        }
        peaks[n_prec++] = peak;
        printf("  %-5s cuBLAS 8192^3 GEMM: %.1f TFLOP/s\n", prec, peak);
        fflush(stdout);
        /* inference weights as the extension holds them: in bf16 the four
         * matrices of each layer packed once (linear_pack_kind) */
        const bert_params *ip = &dp->p;
        bert_packed_params *pp = NULL;
        if (be->linear_pack_kind && be->linear_pack_kind(be, 0) == BACKEND_PACK_BF16) {
            bert_precision plan[BERT_PACK_N];
            bert_pack_plan(BERT_BF16, plan);
            if (bert_params_pack(be, &m->cfg, &dp->p, plan, &pp, err))
                return fail(be, "packing the weights", err);
            ip = &pp->p;
        }
        int batches[] = {1, 32, 256};
        for (int i = 0; i < 3; i++)
            if (bench_inference(be, m, ip, prec, batches[i], seconds, peak)) return 1;
        bert_packed_params_free(pp);
        if (bench_training(be, m, prec, 32, seconds, peak)) return 1;
    }

    printf("\nGPU benchmark (%s, BERT-base shape, seq %d, no padding)\n", device_desc, SEQ);
    printf("| precision | what        | batch | ms/batch | throughput     | model TFLOP/s | of cuBLAS peak |\n");
    printf("|-----------|-------------|------:|---------:|---------------:|--------------:|---------------:|\n");
    for (int p = 0; p < n_prec; p++)
        printf("| %-9s | cuBLAS GEMM | 8192^3|          |                | %13.1f |           100%% |\n",
               names[p], peaks[p]);
    for (int i = 0; i < g_n; i++) {
        const row *r = &g_rows[i];
        printf("| %-9s | %-11s | %5d | %8.3f | %8.0f %-5s | %13.1f | %13.0f%% |\n", r->prec, r->what,
               r->batch, r->ms, r->per_sec, r->unit, r->tflops, 100.0 * r->frac);
    }
    printf("targets (H200, bf16): >= 20000 seq/s inference at batch 256, <= 1 ms at batch 1, "
           ">= 6000 examples/s fine-tuning at batch 32\n");
    bert_device_params_free(dp);
    bert_model_free(m);
    be->destroy(be);
    return 0;
}
