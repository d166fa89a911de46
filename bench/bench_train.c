/* bench_train.c: training throughput of one CPU training step (forward,
 * backward, AdamW) on a randomly initialised model.
 *
 *   build/bench/bench_train [layers hidden heads intermediate] [batch seq]
 *                           [steps] [threads]
 *
 * Defaults: 4 layers, 256 hidden, 4 heads, 1024 intermediate, batch 32 x 128
 * tokens (no padding), 10 timed steps after one warm-up, all cores. Prints
 * examples/s and the time split between forward, backward and optimizer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"
#include "train/bert_train.h"
#include "train/optimizer.h"
#include "train/trainer.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    bert_shape shape = {4, 256, 4, 1024, 128};
    int B = 32, T = 128, steps = 10, threads = 0, V = 21128;
    if (argc > 4) {
        shape.layers = atoi(argv[1]);
        shape.hidden = atoi(argv[2]);
        shape.heads = atoi(argv[3]);
        shape.intermediate = atoi(argv[4]);
    }
    if (argc > 6) {
        B = atoi(argv[5]);
        T = atoi(argv[6]);
    }
    if (argc > 7) steps = atoi(argv[7]);
    if (argc > 8) threads = atoi(argv[8]);
    if (shape.max_length < T) shape.max_length = T;

    char err[SM_ERR_MAX] = "";
    /* A vocabulary the size of bert-base-chinese's. */
    size_t cap = (size_t)V * 12, used = 0;
    char *vocab = malloc(cap);
    const char *specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 0; i < V; i++) {
        if (i < 5) used += (size_t)snprintf(vocab + used, cap - used, "%s\n", specials[i]);
        else used += (size_t)snprintf(vocab + used, cap - used, "t%d\n", i);
    }
    const char *labels[] = {"negative", "positive"};
    bert_model *m;
    backend *be;
    bert_train_ws *ws;
    adamw *opt;
    if (bert_model_create_scratch(&shape, vocab, used, 1, 2, labels, 1, &m, err) ||
        backend_cpu_create(threads, &be, err) ||
        bert_train_ws_create(be, &m->cfg, B, T, &ws, err) ||
        adamw_create(be, &m->cfg, 1, &opt, err)) {
        fprintf(stderr, "bench_train: %s\n", err);
        return 1;
    }
    float *grads = calloc(m->n_floats, sizeof *grads);
    bert_params g;
    bert_params_bind(&m->cfg, 1, grads, &g, err);
    int *ids = malloc((size_t)B * T * sizeof *ids), *lengths = malloc(B * sizeof *lengths);
    int *lab = malloc(B * sizeof *lab);
    for (int b = 0; b < B; b++) {
        lengths[b] = T;
        lab[b] = b & 1;
        for (int t = 0; t < T; t++) ids[b * T + t] = t == 0 ? 2 : t == T - 1 ? 3 : 5 + (b * 131 + t * 17) % (V - 5);
    }
    bert_dropout drop;
    bert_dropout_from_config(&m->cfg, -1, 1, &drop);
    adamw_hparams h;
    adamw_hparams_default(&h);
    double tf = 0, tb = 0, to = 0;
    for (int s = 0; s <= steps; s++) {
        double loss, t0 = now();
        drop.step = (uint64_t)s;
        memset(grads, 0, m->n_floats * sizeof *grads);
        if (bert_train_forward(&m->cfg, &m->p, ws, ids, lengths, lab, B, T, &drop, &loss, NULL, err)) break;
        double t1 = now();
        if (bert_train_backward(&m->cfg, &m->p, &g, ws, 1.0f / B, err)) break;
        double t2 = now();
        if (adamw_step(opt, m->arena, grads, &h, 1e-4f, NULL, err)) break;
        double t3 = now();
        if (s > 0) { /* the first step warms up */
            tf += t1 - t0;
            tb += t2 - t1;
            to += t3 - t2;
        }
    }
    if (err[0]) {
        fprintf(stderr, "bench_train: %s\n", err);
        return 1;
    }
    double total = tf + tb + to;
    printf("train %d layers, hidden %d, heads %d, ffn %d, batch %d x %d, %d threads, dropout %.2g: "
           "%.1f examples/s (step %.0f ms: forward %.0f, backward %.0f, AdamW %.0f), "
           "%zu parameters, workspace %zu MiB\n",
           shape.layers, shape.hidden, shape.heads, shape.intermediate, B, T,
           backend_cpu_threads(be), (double)drop.hidden, steps * B / total, total / steps * 1e3,
           tf / steps * 1e3, tb / steps * 1e3, to / steps * 1e3, m->n_floats,
           bert_train_ws_bytes(ws) >> 20);
    free(ids);
    free(lengths);
    free(lab);
    bert_params_release(&g);
    free(grads);
    adamw_free(opt);
    bert_train_ws_free(ws);
    be->destroy(be);
    bert_model_free(m);
    free(vocab);
    return 0;
}
