/* test_train.c: training against PyTorch, and the training loop's promises.
 *
 * tests/fixtures/gen_train_golden.py saved a tiny random BERT classifier, a
 * padded batch, the loss and every parameter gradient of one forward/backward,
 * and the losses of 10 AdamW steps (warm-up, decay, clipping). Ours must match:
 * every gradient element within 1e-3 relative (|ours - torch| <= 1e-3 *
 * max(|torch|, rms of that tensor, 1e-6 * largest gradient)), every loss
 * within 1e-4. Then: the same
 * seed gives the same bits, micro-batches sum to the full batch, dropout masks
 * repeat and are off in evaluation, clipping, interrupts, NaN losses, and the
 * trainer API end to end.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bert.h"
#include "bert_train.h"
#include "dropout_rng.h"
#include "errors.h"
#include "optimizer.h"
#include "safetensors.h"

#define GOLDEN "tests/fixtures/train"
#define GRAD_TOL 1e-3
#define LOSS_TOL 1e-4
#define MAX_EX 16
#define MAX_T 64

typedef struct batch {
    int B, T;
    int ids[MAX_EX * MAX_T];
    int lengths[MAX_EX];
    int labels[MAX_EX];
} batch;

typedef struct golden {
    float lr, wd, clip, beta1, beta2, eps;
    int warmup, steps;
    double losses[32];
    int n_losses;
    double grad_norm;
} golden;

static bert_model *load_model(void)
{
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int rc = bert_model_load_dir(GOLDEN "/model", &m, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    return m;
}

static void load_batch(const bert_model *m, batch *bt)
{
    FILE *f = fopen(GOLDEN "/batch.txt", "r");
    assert_non_null(f);
    char line[4096];
    int raw[MAX_EX][MAX_T];
    memset(bt, 0, sizeof *bt);
    while (fgets(line, sizeof line, f)) {
        assert_true(bt->B < MAX_EX);
        int b = bt->B++, n = 0;
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        bt->labels[b] = atoi(line);
        for (char *tok = strtok(tab + 1, " \n"); tok; tok = strtok(NULL, " \n")) {
            assert_true(n < MAX_T);
            raw[b][n++] = atoi(tok);
        }
        bt->lengths[b] = n;
        if (n > bt->T) bt->T = n;
    }
    fclose(f);
    int pad = tokenizer_pad_id(m->tok);
    for (int b = 0; b < bt->B; b++)
        for (int t = 0; t < bt->T; t++)
            bt->ids[b * bt->T + t] = t < bt->lengths[b] ? raw[b][t] : pad;
}

static void load_golden(golden *g)
{
    FILE *f = fopen(GOLDEN "/losses.txt", "r");
    assert_non_null(f);
    char line[256];
    memset(g, 0, sizeof *g);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "hyper ", 6)) {
            assert_int_equal(sscanf(line + 6, "%f %f %d %d %f %f %f %f", &g->lr, &g->wd,
                                    &g->warmup, &g->steps, &g->clip, &g->beta1, &g->beta2,
                                    &g->eps), 8);
        } else if (!strncmp(line, "grad_norm ", 10)) {
            g->grad_norm = strtod(line + 10, NULL);
        } else {
            assert_true(g->n_losses < 32);
            g->losses[g->n_losses++] = strtod(line, NULL);
        }
    }
    fclose(f);
    assert_int_equal(g->n_losses, g->steps);
}

/* A trainable copy of a model: gradient arena and views on the CPU. */
typedef struct trainable {
    bert_model *m;
    backend *be;
    bert_train_ws *ws;
    float *grads;
    bert_params g;
} trainable;

static void trainable_init(trainable *tr, int threads, int max_batch, int max_seq)
{
    char err[SM_ERR_MAX] = "";
    tr->m = load_model();
    assert_int_equal(backend_cpu_create(threads, &tr->be, err), SM_OK);
    int rc = bert_train_ws_create(tr->be, &tr->m->cfg, max_batch, max_seq, &tr->ws, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    tr->grads = calloc(tr->m->n_floats, sizeof *tr->grads);
    assert_non_null(tr->grads);
    assert_int_equal(bert_params_bind(&tr->m->cfg, 1, tr->grads, &tr->g, err), SM_OK);
}

static void trainable_free(trainable *tr)
{
    bert_params_release(&tr->g);
    free(tr->grads);
    bert_train_ws_free(tr->ws);
    tr->be->destroy(tr->be);
    bert_model_free(tr->m);
}

/* Forward + backward of examples [first, first+B) of bt, loss scaled by
 * 1/total; returns the loss sum. */
static double fwd_bwd(trainable *tr, const batch *bt, int first, int B, int total,
                      const bert_dropout *drop)
{
    char err[SM_ERR_MAX] = "";
    double loss;
    int T = bt->T;
    int rc = bert_train_forward(&tr->m->cfg, &tr->m->p, tr->ws, bt->ids + first * T,
                                bt->lengths + first, bt->labels + first, B, T, drop, &loss,
                                NULL, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    rc = bert_train_backward(&tr->m->cfg, &tr->m->p, &tr->g, tr->ws, 1.0f / (float)total, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    return loss;
}

/* Worst |ours - torch| / max(|torch|, rms(torch tensor)) over every tensor;
 * fails listing each tensor that is off. */
static double compare_grads(const bert_model *m, const float *grads, const char *path,
                            double tol)
{
    char err[SM_ERR_MAX] = "";
    safetensors st;
    assert_int_equal(safetensors_open_file(path, &st, err), SM_OK);
    bert_param_spec *specs;
    int n;
    size_t total;
    assert_int_equal(bert_param_table(&m->cfg, 1, &specs, &n, &total, err), SM_OK);
    assert_int_equal(total, m->n_floats);
    /* The floor of the scale: 1e-6 of the largest gradient in the model.
     * Without it a tensor whose exact gradient is zero (the key biases:
     * softmax ignores a constant added to a row) compares rounding noise
     * with rounding noise. */
    double gmax = 0;
    for (int i = 0; i < n; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s%s", strncmp(specs[i].name, "classifier.", 11) ? "bert." : "",
                 specs[i].name);
        const st_tensor *t = safetensors_find(&st, name);
        if (!t) fail_msg("golden gradient '%s' missing", name);
        float *want = malloc(specs[i].numel * sizeof *want);
        assert_int_equal(st_tensor_to_f32(t, want, err), SM_OK);
        for (size_t k = 0; k < specs[i].numel; k++)
            if (fabs(want[k]) > gmax) gmax = fabs(want[k]);
        free(want);
    }
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char name[160];
        if (!strncmp(specs[i].name, "classifier.", 11))
            snprintf(name, sizeof name, "%s", specs[i].name);
        else
            snprintf(name, sizeof name, "bert.%s", specs[i].name);
        const st_tensor *t = safetensors_find(&st, name);
        if (!t) fail_msg("golden gradient '%s' missing", name);
        assert_int_equal((size_t)t->numel, specs[i].numel);
        float *want = malloc(specs[i].numel * sizeof *want);
        assert_int_equal(st_tensor_to_f32(t, want, err), SM_OK);
        double ss = 0;
        for (size_t k = 0; k < specs[i].numel; k++) ss += (double)want[k] * want[k];
        double rms = sqrt(ss / (double)specs[i].numel);
        if (rms < 1e-6 * gmax) rms = 1e-6 * gmax;
        double tensor_worst = 0;
        size_t at = 0;
        for (size_t k = 0; k < specs[i].numel; k++) {
            double a = grads[specs[i].offset + k], b = want[k];
            double ref = fabs(b) > rms ? fabs(b) : rms;
            double rel = ref > 0 ? fabs(a - b) / ref : fabs(a - b) * 1e30;
            if (!(rel <= tensor_worst)) {
                tensor_worst = rel;
                at = k;
            }
        }
        if (getenv("TRAIN_VERBOSE")) print_message("  %-55s %.2e\n", name, tensor_worst);
        if (!(tensor_worst <= tol)) {
            print_error("gradient %s[%zu]: ours %.9g, torch %.9g (relative %.3g)\n", name, at,
                        (double)grads[specs[i].offset + at], (double)want[at], tensor_worst);
            bad++;
        }
        if (tensor_worst > worst || isnan(tensor_worst)) worst = tensor_worst;
        free(want);
    }
    free(specs);
    safetensors_close(&st);
    if (bad) fail_msg("%d gradient tensors differ from PyTorch", bad);
    return worst;
}

static void test_golden_gradients_and_losses(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    trainable tr;
    batch bt;
    golden g;
    trainable_init(&tr, 2, MAX_EX, MAX_T);
    load_batch(tr.m, &bt);
    load_golden(&g);

    /* One forward/backward: loss and every gradient. */
    double loss = fwd_bwd(&tr, &bt, 0, bt.B, bt.B, NULL) / bt.B;
    double worst = compare_grads(tr.m, tr.grads, GOLDEN "/grads.safetensors", GRAD_TOL);
    print_message("golden: loss %.7f (torch %.7f), worst gradient relative difference %.2e\n",
                  loss, g.losses[0], worst);
    assert_true(fabs(loss - g.losses[0]) <= LOSS_TOL);

    /* 10 AdamW steps from the start, as the script did. */
    trainable_free(&tr);
    trainable_init(&tr, 2, MAX_EX, MAX_T);
    adamw *opt;
    assert_int_equal(adamw_create(tr.be, &tr.m->cfg, 1, &opt, err), SM_OK);
    adamw_hparams h = {g.lr, g.beta1, g.beta2, g.eps, g.wd, g.clip};
    double worst_loss = 0;
    for (int s = 0; s < g.steps; s++) {
        memset(tr.grads, 0, tr.m->n_floats * sizeof *tr.grads);
        double l = fwd_bwd(&tr, &bt, 0, bt.B, bt.B, NULL) / bt.B;
        float norm;
        float lr = lr_linear_schedule(g.lr, s, g.warmup, g.steps);
        int rc = adamw_step(opt, tr.m->arena, tr.grads, &h, lr, &norm, err);
        if (rc) print_error("%s\n", err);
        assert_int_equal(rc, SM_OK);
        if (s == 0) assert_true(fabs(norm - g.grad_norm) <= 1e-4 * g.grad_norm);
        double d = fabs(l - g.losses[s]);
        if (d > worst_loss) worst_loss = d;
        if (!(d <= LOSS_TOL))
            fail_msg("step %d: loss %.7f, torch %.7f", s, l, g.losses[s]);
    }
    print_message("golden: %d AdamW steps, worst loss difference %.2e (last %.6f)\n", g.steps,
                  worst_loss, g.losses[g.steps - 1]);
    adamw_free(opt);
    trainable_free(&tr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_gradients_and_losses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
