/* test_train.c: training against PyTorch, and the training loop's promises.
 *
 * tests/fixtures/gen_train_golden.py saved a tiny random BERT classifier, a
 * padded batch, the loss and every parameter gradient of one forward/backward,
 * and the losses of 10 AdamW steps (warm-up, decay, clipping). Ours must match:
 * every gradient element within 1e-3 relative (|ours - torch| <= 1e-3 *
 * max(|torch|, rms of that tensor, 1e-6 * largest gradient)), every loss
 * within 1e-4. tests/fixtures/gen_distill_golden.py saved the same for the
 * distillation loss (soft targets at temperature 2, weight 0.6, two rows
 * without a label), held to the same bounds. Then: the same
 * seed gives the same bits, micro-batches sum to the full batch, dropout masks
 * repeat and are off in evaluation, clipping, interrupts, NaN losses, and the
 * trainer API end to end, distillation included (soft-target rows, their
 * checks, and a student that learns its teacher's probabilities).
 */
#include "cpu/backend_cpu.h"
#include "support/train_test_util.h"

#include "core/errors.h"
#include "core/rng.h"
#include "encoder/bert.h"
#include "format/safetensors.h"
#include "tokenize/vocab_builder.h"
#include "train/bert_train.h"
#include "train/optimizer.h"
#include "train/trainer.h"

#define GOLDEN "tests/fixtures/train"

typedef struct batch {
    int B, T;
    int ids[MAX_EX * MAX_T];
    int lengths[MAX_EX];
    int labels[MAX_EX];
} batch;

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
        double a = max_abs(want, specs[i].numel);
        if (a > gmax) gmax = a;
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
        double tensor_worst = check_tensor(name, grads + specs[i].offset, want, specs[i].numel,
                                           gmax, tol, &bad);
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
    load_golden(GOLDEN "/losses.txt", &g);

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
    adamw_hparams h = {g.lr, g.beta1, g.beta2, g.eps, g.wd, g.clip, 0.0f}; /* head at lr */
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

/* ---- distillation against PyTorch ------------------------------------------ */

#define DISTILL "tests/fixtures/distill"

static void test_distill_golden(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    trainable tr;
    batch bt;
    trainable_init(&tr, 2, MAX_EX, MAX_T);
    load_batch(tr.m, &bt);
    int K = tr.m->cfg.num_labels;
    float soft[MAX_EX * 3], T, alpha;
    int labels[MAX_EX];
    assert_int_equal(K, 3);
    FILE *f = fopen(DISTILL "/targets.txt", "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%f %f", &T, &alpha), 2);
    for (int b = 0; b < bt.B; b++)
        assert_int_equal(fscanf(f, "%d %f %f %f", &labels[b], &soft[b * K], &soft[b * K + 1],
                                &soft[b * K + 2]), 4);
    fclose(f);
    f = fopen(DISTILL "/loss.txt", "r");
    assert_non_null(f);
    double want;
    assert_int_equal(fscanf(f, "%lf", &want), 1);
    fclose(f);

    bert_targets tg = {labels, soft, alpha, T};
    double loss;
    int rc = bert_train_forward_targets(&tr.m->cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, &tg,
                                        bt.B, bt.T, NULL, &loss, NULL, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_int_equal(bert_train_backward(&tr.m->cfg, &tr.m->p, &tr.g, tr.ws, 1.0f / bt.B, err),
                     SM_OK);
    double worst = compare_grads(tr.m, tr.grads, DISTILL "/grads.safetensors", GRAD_TOL);
    print_message("distill golden: loss %.7f (torch %.7f), worst gradient relative %.2e\n",
                  loss / bt.B, want, worst);
    assert_true(fabs(loss / bt.B - want) <= LOSS_TOL);

    /* Bad targets are refused before any work. */
    float bad = soft[0];
    const float bad_values[2] = {bad + 0.5f /* the row no longer sums to 1 */, NAN};
    for (int i = 0; i < 2; i++) {
        soft[0] = bad_values[i];
        assert_int_equal(bert_train_forward_targets(&tr.m->cfg, &tr.m->p, tr.ws, bt.ids,
                                                    bt.lengths, &tg, bt.B, bt.T, NULL, &loss,
                                                    NULL, err),
                         SM_ERR_INVALID);
        if (i == 0) assert_non_null(strstr(err, "sum to"));
    }
    soft[0] = bad;
    tg.temperature = 0;
    assert_int_equal(bert_train_forward_targets(&tr.m->cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths,
                                                &tg, bt.B, bt.T, NULL, &loss, NULL, err),
                     SM_ERR_INVALID);
    /* without soft targets a label of -1 is still an error */
    assert_int_equal(bert_train_forward(&tr.m->cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, labels,
                                        bt.B, bt.T, NULL, &loss, NULL, err),
                     SM_ERR_INVALID);
    trainable_free(&tr);
}

/* alpha 0 is the hard loss exactly; one-hot targets at T 1 with alpha 1 too. */
static void test_distill_limits(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    trainable tr;
    batch bt;
    trainable_init(&tr, 1, MAX_EX, MAX_T);
    load_batch(tr.m, &bt);
    int K = tr.m->cfg.num_labels;
    float onehot[MAX_EX * 3] = {0}, *g_hard = malloc(tr.m->n_floats * sizeof *g_hard);
    for (int b = 0; b < bt.B; b++) onehot[b * K + bt.labels[b]] = 1;
    double hard = fwd_bwd(&tr, &bt, 0, bt.B, bt.B, NULL);
    memcpy(g_hard, tr.grads, tr.m->n_floats * sizeof *g_hard);
    bert_targets cases[2] = {{bt.labels, onehot, 0.0f, 3.0f}, {bt.labels, onehot, 1.0f, 1.0f}};
    for (int c = 0; c < 2; c++) {
        double loss;
        memset(tr.grads, 0, tr.m->n_floats * sizeof *tr.grads);
        assert_int_equal(bert_train_forward_targets(&tr.m->cfg, &tr.m->p, tr.ws, bt.ids,
                                                    bt.lengths, &cases[c], bt.B, bt.T, NULL,
                                                    &loss, NULL, err),
                         SM_OK);
        assert_int_equal(bert_train_backward(&tr.m->cfg, &tr.m->p, &tr.g, tr.ws, 1.0f / bt.B, err),
                         SM_OK);
        assert_true(fabs(loss - hard) <= 1e-5 * fabs(hard));
        assert_true(max_abs_diff(tr.grads, g_hard, tr.m->n_floats) <=
                    1e-5 * max_abs(g_hard, tr.m->n_floats));
    }
    free(g_hard);
    trainable_free(&tr);
}

/* Soft-target datasets: all rows or none, each a distribution. */
static void test_distill_dataset(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    train_dataset *ds;
    int ids[4] = {2, 600, 601, 3};
    float p[3] = {0.2f, 0.3f, 0.5f}, bad[3] = {0.2f, 0.3f, 0.6f}, nan3[3] = {NAN, 0.5f, 0.5f};
    assert_int_equal(train_dataset_create(2000, &ds, err), SM_OK);
    assert_int_equal(train_dataset_add_soft(ds, ids, 4, -1, p, 3, err), SM_OK);
    assert_int_equal(train_dataset_add_soft(ds, ids, 4, 1, p, 3, err), SM_OK);
    assert_int_equal(train_dataset_add(ds, ids, 4, 0, err), SM_ERR_INVALID);
    assert_int_equal(train_dataset_add_soft(ds, ids, 4, 0, bad, 3, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "sum to"));
    assert_int_equal(train_dataset_add_soft(ds, ids, 4, 0, nan3, 3, err), SM_ERR_INVALID);
    assert_int_equal(train_dataset_add_soft(ds, ids, 4, 3, p, 3, err), SM_ERR_INVALID);
    assert_int_equal(train_dataset_add_soft(ds, ids, 4, -2, p, 3, err), SM_ERR_INVALID);
    assert_int_equal(train_dataset_add_soft(ds, ids, 4, 0, p, 2, err), SM_ERR_INVALID);
    assert_int_equal(train_dataset_rows(ds), 2);
    int n, label, back[4];
    assert_int_equal(train_dataset_row(ds, 0, back, 4, &n, &label), SM_OK);
    assert_int_equal(label, 2); /* no label: the targets' top one */
    assert_true(train_dataset_bytes_per_row(ds) >= 4 * 2 + 3 * sizeof(float));
    train_dataset_free(ds);

    assert_int_equal(train_dataset_create(2000, &ds, err), SM_OK);
    assert_int_equal(train_dataset_add(ds, ids, 4, 0, err), SM_OK);
    assert_int_equal(train_dataset_add_soft(ds, ids, 4, 0, p, 3, err), SM_ERR_INVALID);
    train_dataset_free(ds);
}

/* Micro-batches add up: batch 8 in one pass == 2 micro-batches of 4. */
static void test_gradient_accumulation(void **state)
{
    (void)state;
    trainable a, b;
    batch bt;
    trainable_init(&a, 2, MAX_EX, MAX_T);
    trainable_init(&b, 2, MAX_EX, MAX_T);
    load_batch(a.m, &bt);
    assert_int_equal(bt.B, 8);
    double la = fwd_bwd(&a, &bt, 0, 8, 8, NULL);
    double lb = fwd_bwd(&b, &bt, 0, 4, 8, NULL) + fwd_bwd(&b, &bt, 4, 4, 8, NULL);
    assert_true(fabs(la - lb) <= 1e-5 * fabs(la));
    double rms = rms_of(a.grads, a.m->n_floats);
    double worst = max_abs_diff(a.grads, b.grads, a.m->n_floats);
    print_message("accumulation: max |full - 2 x half| %.2e (gradient rms %.2e)\n", worst, rms);
    assert_true(worst <= 1e-4 * rms + 1e-9);
    trainable_free(&a);
    trainable_free(&b);
}

/* The same dropout key gives the same bits; another step another mask; no
 * dropout equals the inference forward. */
static void test_dropout_reproducible_and_off_in_eval(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    trainable tr;
    batch bt;
    trainable_init(&tr, 2, MAX_EX, MAX_T);
    load_batch(tr.m, &bt);
    bert_dropout d;
    bert_dropout_from_config(&tr.m->cfg, 0.2f, 11, &d);
    assert_true(d.hidden == 0.2f && d.attention == 0.2f && d.classifier == 0.2f);
    float l1[MAX_EX * 4], l2[MAX_EX * 4], l3[MAX_EX * 4], eval[MAX_EX * 4], inf[MAX_EX * 4];
    double s1, s2, s3, se;
    const bert_config *cfg = &tr.m->cfg;
    assert_int_equal(bert_train_forward(cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels, bt.B,
                                        bt.T, &d, &s1, l1, err), SM_OK);
    assert_int_equal(bert_train_forward(cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels, bt.B,
                                        bt.T, &d, &s2, l2, err), SM_OK);
    assert_memory_equal(l1, l2, (size_t)bt.B * cfg->num_labels * sizeof *l1);
    d.step++;
    assert_int_equal(bert_train_forward(cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels, bt.B,
                                        bt.T, &d, &s3, l3, err), SM_OK);
    assert_memory_not_equal(l1, l3, (size_t)bt.B * cfg->num_labels * sizeof *l1);
    /* evaluation: no dropout, the inference forward's logits */
    assert_int_equal(bert_train_forward(cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels, bt.B,
                                        bt.T, NULL, &se, eval, err), SM_OK);
    bert_workspace *iws;
    assert_int_equal(bert_workspace_create(tr.be, cfg, bt.B, bt.T, &iws, err), SM_OK);
    assert_int_equal(bert_forward(cfg, &tr.m->p, iws, bt.ids, bt.lengths, bt.B, bt.T, inf, NULL, err),
                     SM_OK);
    for (int i = 0; i < bt.B * cfg->num_labels; i++) assert_true(fabsf(eval[i] - inf[i]) <= 1e-5f);
    bert_workspace_free(iws);
    /* A dropout config of 0 is exactly no dropout. */
    bert_dropout_from_config(cfg, 0.0f, 11, &d);
    assert_int_equal(bert_train_forward(cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels, bt.B,
                                        bt.T, &d, &s3, l3, err), SM_OK);
    assert_memory_equal(l3, eval, (size_t)bt.B * cfg->num_labels * sizeof *l3);
    trainable_free(&tr);
}

/* Clipping scales the gradients to the limit; above it nothing changes. */
static void test_clipping(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    trainable tr;
    batch bt;
    trainable_init(&tr, 2, MAX_EX, MAX_T);
    load_batch(tr.m, &bt);
    fwd_bwd(&tr, &bt, 0, bt.B, bt.B, NULL);
    adamw *opt;
    assert_int_equal(adamw_create(tr.be, &tr.m->cfg, 1, &opt, err), SM_OK);
    float norm, after, before_clip;
    assert_int_equal(grad_global_norm(opt, tr.grads, &norm, err), SM_OK);
    adamw_hparams h;
    adamw_hparams_default(&h);
    h.grad_clip = norm / 4;
    assert_int_equal(adamw_step(opt, tr.m->arena, tr.grads, &h, 1e-3f, &before_clip, err), SM_OK);
    assert_true(before_clip == norm);
    assert_int_equal(grad_global_norm(opt, tr.grads, &after, err), SM_OK);
    assert_true(fabsf(after - norm / 4) <= 1e-5f * norm);
    h.grad_clip = after * 2;
    assert_int_equal(adamw_step(opt, tr.m->arena, tr.grads, &h, 1e-3f, NULL, err), SM_OK);
    assert_int_equal(grad_global_norm(opt, tr.grads, &norm, err), SM_OK);
    assert_true(norm == after);
    assert_int_equal(adamw_steps(opt), 2);
    /* A non-finite gradient is an error that leaves the parameters alone. */
    float *copy = malloc(tr.m->n_floats * sizeof *copy);
    memcpy(copy, tr.m->arena, tr.m->n_floats * sizeof *copy);
    tr.grads[3] = NAN;
    assert_int_equal(adamw_step(opt, tr.m->arena, tr.grads, &h, 1e-3f, NULL, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "not finite"));
    assert_memory_equal(copy, tr.m->arena, tr.m->n_floats * sizeof *copy);
    free(copy);
    adamw_free(opt);
    trainable_free(&tr);
}

/* The backend's per-range adamw op against torch.optim.AdamW's update
 * written out in double, over 3 steps of an arena large enough to split
 * across threads; the gradient is only read. */
static void test_adamw_op(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    backend *be;
    assert_int_equal(backend_cpu_create(2, &be, err), SM_OK);
    enum { N = 100003 };
    static float p[N], g[N], m[N], v[N], g0[N];
    static double rp[N], rm[N], rv[N];
    uint64_t s = 7;
    for (int i = 0; i < N; i++) {
        p[i] = (float)rng_normal(&s);
        g[i] = g0[i] = (float)rng_normal(&s) * 0.1f;
        rp[i] = p[i];
    }
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    double worst = 0;
    for (int t = 1; t <= 3; t++) {
        assert_int_equal(be->adamw(be, p, g, m, v, N, lr, b1, b2, eps, wd, t), SM_OK);
        for (int i = 0; i < N; i++) {
            rp[i] -= (double)lr * wd * rp[i];
            rm[i] = b1 * rm[i] + (1.0 - b1) * g0[i];
            rv[i] = b2 * rv[i] + (1.0 - b2) * (double)g0[i] * g0[i];
            rp[i] -= lr / (1.0 - pow(b1, t)) * rm[i] / (sqrt(rv[i]) / sqrt(1.0 - pow(b2, t)) + eps);
            double d = fabs(p[i] - rp[i]);
            if (d > worst) worst = d;
        }
    }
    assert_memory_equal(g, g0, sizeof g);
    assert_true(worst < 1e-6);
    be->destroy(be);
}

static void test_schedule(void **state)
{
    (void)state;
    /* transformers.get_linear_schedule_with_warmup(warmup 2, total 10) */
    double want[] = {0, 0.5, 1, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0, 0};
    for (int s = 0; s < 12; s++)
        assert_true(fabs(lr_linear_schedule(1.0f, s, 2, 10) - want[s]) <= 1e-7);
    assert_true(lr_linear_schedule(2.0f, 0, 0, 4) == 2.0f);
}

/* ---- the trainer ------------------------------------------------------- */

/* A synthetic task in the fixture vocabulary: a row holds filler tokens and
 * one keyword; the keyword's group is the label. */
static train_dataset *synthetic(int vocab, int rows, int K, uint64_t seed)
{
    char err[SM_ERR_MAX] = "";
    train_dataset *ds;
    assert_int_equal(train_dataset_create(vocab, &ds, err), SM_OK);
    uint64_t s = seed;
    int ids[40];
    for (int r = 0; r < rows; r++) {
        s = rng_mix64(s);
        int label = (int)(s % (uint64_t)K), n = 4 + (int)((s >> 8) % 20), key = 1 + (int)((s >> 16) % (n - 2));
        ids[0] = 2;
        for (int t = 1; t < n - 1; t++) ids[t] = 800 + (int)((rng_mix64(s + t) >> 20) % 40);
        ids[key] = 520 + 10 * label + (int)((s >> 24) % 3);
        ids[n - 1] = 3;
        assert_int_equal(train_dataset_add(ds, ids, n, label, err), SM_OK);
    }
    return ds;
}

static int count_progress(void *user, const trainer_progress *p)
{
    counter *c = user;
    c->calls++;
    c->last_step = p->loop.step;
    if (p->loop.epoch_done) {
        c->epochs_seen++;
        assert_true(p->loop.examples_per_sec > 0);
    }
    return 0;
}

static void test_trainer_learns(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = cpu_backend(1);
    bert_model *m = load_model();
    train_dataset *ds = synthetic(m->cfg.vocab_size, 320, 3, 77);
    double bpr = train_dataset_bytes_per_row(ds);
    print_message("trainer: dataset %d rows, %.1f bytes per row, %zu bytes held\n",
                  train_dataset_rows(ds), bpr, train_dataset_bytes(ds));
    assert_true(bpr < 2 * 24 + 16 + 1);

    trainer_options o;
    trainer_options_default(&o);
    o.loop.epochs = 8;
    o.loop.lr = 3e-3f;
    o.loop.batch_size = 16;
    o.loop.valid_fraction = 0.25f;
    o.loop.dropout = 0.0f;
    counter c = {0};
    o.progress = count_progress;
    o.loop.user = &c;
    trainer_result r;
    int rc = trainer_run(m, be, ds, &o, &r, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_int_equal(r.n_valid, 80);
    assert_int_equal(r.n_train, 240);
    assert_int_equal(r.steps, 8 * 15);
    assert_int_equal(c.epochs_seen, 8);
    assert_int_equal(c.last_step, 120);
    for (int e = 0; e < r.epochs; e++)
        print_message("  epoch %d: loss %.4f, validation accuracy %.3f\n", e + 1, r.train_loss[e],
                      r.valid_accuracy[e]);
    print_message("  best epoch %d (%.3f), %.2f s, %.0f examples/s\n", r.best_epoch,
                  r.best_accuracy, r.seconds, r.examples_per_sec);
    assert_true(r.valid_accuracy[0] < 0.6); /* from chance ... */
    assert_true(r.best_accuracy > 0.95);    /* ... to learned */
    assert_true(r.train_loss[r.epochs - 1] < r.train_loss[0]);
    assert_true(r.valid_accuracy[r.best_epoch - 1] == r.best_accuracy);
    for (int e = 0; e < r.epochs; e++) assert_true(r.valid_accuracy[e] <= r.best_accuracy);
    for (int e = 0; e < r.best_epoch - 1; e++) assert_true(r.valid_accuracy[e] < r.best_accuracy);
    trainer_result_free(&r);
    train_dataset_free(ds);
    bert_model_free(m);
    be->destroy(be);
}

/* A student on the synthetic task with soft targets only: the teacher
 * gives the keyword's label 0.7 and the others 0.15 each. Trained with the
 * distillation loss (alpha 1) the student learns the task (accuracy against
 * the targets' top label) and the teacher's confidence, not certainty: its
 * mean top probability ends near 0.7, where hard labels would push it to 1. */
static void test_trainer_distills(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = cpu_backend(2);
    bert_model *m = load_model();
    train_dataset *hard = synthetic(m->cfg.vocab_size, 320, 3, 77), *ds;
    assert_int_equal(train_dataset_create(m->cfg.vocab_size, &ds, err), SM_OK);
    int ids[64], n, label;
    for (int i = 0; i < train_dataset_rows(hard); i++) {
        assert_int_equal(train_dataset_row(hard, i, ids, 64, &n, &label), SM_OK);
        float p[3] = {0.15f, 0.15f, 0.15f};
        p[label] = 0.7f;
        assert_int_equal(train_dataset_add_soft(ds, ids, n, -1, p, 3, err), SM_OK);
    }
    trainer_options o;
    trainer_options_default(&o);
    o.loop.epochs = 8;
    o.loop.lr = 3e-3f;
    o.loop.batch_size = 16;
    o.loop.valid_fraction = 0.25f;
    o.loop.dropout = 0.0f;
    o.distill_alpha = 1.0f;
    trainer_result r;
    int rc = trainer_run(m, be, ds, &o, &r, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    print_message("distill: best epoch %d, accuracy against the targets %.3f, loss %.4f -> %.4f\n",
                  r.best_epoch, r.best_accuracy, r.train_loss[0], r.train_loss[r.epochs - 1]);
    assert_true(r.best_accuracy > 0.95);
    assert_true(r.train_loss[r.epochs - 1] < r.train_loss[0]);
    trainer_result_free(&r);

    /* The student's confidence on the held-out rows' logits. */
    bert_train_ws *ws;
    assert_int_equal(bert_train_ws_create(be, &m->cfg, 16, 40, &ws, err), SM_OK);
    double top = 0;
    int rows = 0;
    for (int i = 0; i < 64; i++) {
        assert_int_equal(train_dataset_row(hard, i, ids, 40, &n, &label), SM_OK);
        float z[3];
        double loss;
        assert_int_equal(bert_train_forward(&m->cfg, &m->p, ws, ids, &n, &label, 1, n, NULL,
                                            &loss, z, err),
                         SM_OK);
        double mx = fmax(z[0], fmax(z[1], z[2])), s = 0;
        for (int k = 0; k < 3; k++) s += exp(z[k] - mx);
        top += 1 / s;
        rows++;
    }
    print_message("distill: mean top probability %.3f (teacher 0.7)\n", top / rows);
    assert_true(fabs(top / rows - 0.7) < 0.08);
    bert_train_ws_free(ws);

    o.distill_temperature = -1;
    assert_int_equal(trainer_run(m, be, ds, &o, &r, err), SM_ERR_INVALID);
    trainer_result_free(&r);
    train_dataset_free(ds);
    train_dataset_free(hard);
    bert_model_free(m);
    be->destroy(be);
}

/* Same seed, same data, dropout on, two threads: the same model, bit for
 * bit; another seed, another model. */
static void test_trainer_deterministic(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = cpu_backend(2);
    bert_model *m[3] = {load_model(), load_model(), load_model()};
    train_dataset *ds = synthetic(m[0]->cfg.vocab_size, 48, 3, 3);
    trainer_options o;
    trainer_options_default(&o);
    o.loop.epochs = 2;
    o.loop.lr = 1e-3f;
    o.loop.batch_size = 16;
    o.loop.accumulation = 2;
    o.loop.dropout = 0.1f;
    trainer_result r[3];
    for (int i = 0; i < 3; i++) {
        o.loop.seed = i < 2 ? 5 : 6;
        int rc = trainer_run(m[i], be, ds, &o, &r[i], err);
        if (rc) print_error("%s\n", err);
        assert_int_equal(rc, SM_OK);
    }
    assert_memory_equal(m[0]->arena, m[1]->arena, m[0]->n_floats * sizeof(float));
    assert_memory_equal(r[0].train_loss, r[1].train_loss, 2 * sizeof(double));
    assert_memory_not_equal(m[0]->arena, m[2]->arena, m[0]->n_floats * sizeof(float));
    for (int i = 0; i < 3; i++) {
        trainer_result_free(&r[i]);
        bert_model_free(m[i]);
    }
    train_dataset_free(ds);
    be->destroy(be);
}

static void test_trainer_interrupt_and_nan(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = cpu_backend(2);
    bert_model *m = load_model();
    train_dataset *ds = synthetic(m->cfg.vocab_size, 64, 3, 9);
    float *before = malloc(m->n_floats * sizeof *before);
    memcpy(before, m->arena, m->n_floats * sizeof *before);
    trainer_options o;
    trainer_options_default(&o);
    o.loop.batch_size = 8;
    o.loop.accumulation = 2;
    counter c = {.stop_after = 5};
    o.loop.interrupt = stop_interrupt;
    o.loop.user = &c;
    trainer_result r;
    assert_int_equal(trainer_run(m, be, ds, &o, &r, err), SM_ERR_INTERRUPTED);
    assert_non_null(strstr(err, "interrupted"));
    assert_int_equal(c.polls, 6); /* stopped at the first poll that said so */
    assert_memory_equal(before, m->arena, m->n_floats * sizeof *before);
    assert_null(r.train_loss);

    /* A NaN in the parameters: the loss is NaN, reported, model untouched. */
    o.loop.interrupt = NULL;
    m->p.cls_b[1] = NAN;
    memcpy(before, m->arena, m->n_floats * sizeof *before);
    assert_int_equal(trainer_run(m, be, ds, &o, &r, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "NaN"));
    assert_memory_equal(before, m->arena, m->n_floats * sizeof *before);

    /* Bad options and data are errors with the value named. */
    trainer_options_default(&o);
    o.loop.batch_size = 0;
    assert_int_equal(trainer_run(m, be, ds, &o, &r, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "batch_size 0"));
    trainer_options_default(&o);
    o.loop.valid_fraction = 0.99f;
    assert_int_equal(trainer_run(m, be, ds, &o, &r, err), SM_ERR_INVALID);
    int ids[3] = {2, 600, 3};
    assert_int_equal(train_dataset_add(ds, ids, 3, 7, err), SM_OK);
    trainer_options_default(&o);
    assert_int_equal(trainer_run(m, be, ds, &o, &r, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "label index 7"));
    ids[1] = 999999;
    assert_int_equal(train_dataset_add(ds, ids, 3, 0, err), SM_ERR_INVALID);
    free(before);
    train_dataset_free(ds);
    bert_model_free(m);
    be->destroy(be);
}

static void test_prepare_head(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m = load_model();
    size_t n0 = m->n_floats;
    float *body = malloc(n0 * sizeof *body);
    memcpy(body, m->arena, n0 * sizeof *body);
    int kept;
    const char *same[] = {"pos", "neg", "neu"};
    assert_int_equal(trainer_prepare_head(m, 3, same, 1, &kept, err), SM_OK);
    assert_int_equal(kept, 1);
    assert_int_equal(bert_config_label_index(&m->cfg, "pos"), 2);
    const char *other[] = {"bad", "good"};
    assert_int_equal(trainer_prepare_head(m, 2, other, 1, &kept, err), SM_OK);
    assert_int_equal(kept, 0);
    assert_int_equal(m->cfg.num_labels, 2);
    assert_string_equal(m->cfg.id2label[1], "good");
    int C = m->cfg.hidden_size;
    assert_int_equal(m->n_floats, n0 - 3 * (size_t)C - 3 + 2 * (size_t)C + 2);
    /* the body is unchanged, the head is normal(0, 0.02) with zero bias */
    assert_memory_equal(body, m->arena, (n0 - 3 * (size_t)C - 3) * sizeof *body);
    double ss = 0;
    for (int i = 0; i < 2 * C; i++) ss += (double)m->p.cls_w[i] * m->p.cls_w[i];
    assert_true(fabs(sqrt(ss / (2 * C)) - 0.02) < 0.006);
    assert_true(m->p.cls_b[0] == 0 && m->p.cls_b[1] == 0);
    /* seeded: the same seed gives the same head */
    bert_model *m2 = load_model();
    assert_int_equal(trainer_prepare_head(m2, 2, other, 1, &kept, err), SM_OK);
    assert_memory_equal(m->p.cls_w, m2->p.cls_w, 2 * (size_t)C * sizeof(float));
    const char *one[] = {"x"};
    assert_int_equal(trainer_prepare_head(m2, 1, one, 1, &kept, err), SM_ERR_INVALID);
    free(body);
    bert_model_free(m);
    bert_model_free(m2);
}

/* ---- vocabularies and models from scratch ------------------------------- */

static const char *const k_texts[] = {
    "房间很干净，服务很好。", "服务太差了，房间也不干净。", "GOOD hotel, good food!",
    "早餐很好吃", "价格便宜，位置好", "good good 很好", "差评：隔音差", "Café nice",
};
#define N_TEXTS (int)(sizeof k_texts / sizeof *k_texts)

static char *build_vocab(int reverse, int min_count, int max_size, size_t *len, int *n)
{
    char err[SM_ERR_MAX] = "";
    vocab_builder *vb;
    assert_int_equal(vocab_builder_create(1, &vb, err), SM_OK);
    for (int i = 0; i < N_TEXTS; i++) {
        const char *t = k_texts[reverse ? N_TEXTS - 1 - i : i];
        assert_int_equal(vocab_builder_add(vb, t, strlen(t), err), SM_OK);
    }
    char *v;
    assert_int_equal(vocab_builder_build(vb, min_count, max_size, &v, len, n, err), SM_OK);
    vocab_builder_free(vb);
    return v;
}

static int has_line(const char *vocab, const char *tok)
{
    size_t n = strlen(tok);
    for (const char *p = vocab; *p;) {
        const char *e = strchr(p, '\n');
        if ((size_t)(e - p) == n && !memcmp(p, tok, n)) return 1;
        p = e + 1;
    }
    return 0;
}

static void test_vocab_builder(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    size_t len, len2;
    int n, n2;
    char *v = build_vocab(0, 2, 0, &len, &n);
    char *v2 = build_vocab(1, 2, 0, &len2, &n2);
    /* depends on the texts, not their order */
    assert_int_equal(len, len2);
    assert_memory_equal(v, v2, len);
    assert_int_equal(strncmp(v, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", 31), 0);
    assert_true(has_line(v, "好") && has_line(v, "很") && has_line(v, "，"));
    assert_true(has_line(v, "good"));  /* a frequent word, lower-cased */
    assert_true(has_line(v, "##o"));   /* continuation of a character seen inside words */
    assert_false(has_line(v, "hotel")); /* once only */
    assert_false(has_line(v, "早"));    /* once only */
    assert_false(has_line(v, "GOOD"));
    int lines = 0;
    for (const char *p = v; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, n);
    /* the tokenizer takes it, and known characters never become [UNK] */
    tokenizer *tok;
    assert_int_equal(tokenizer_load_buffer(v, len, 1, &tok, err), SM_OK);
    int ids[32], count, cut;
    const char *t = "服务很好 good food";
    assert_int_equal(tokenizer_encode(tok, t, strlen(t), 32, ids, &count, &cut, err), SM_OK);
    for (int i = 0; i < count; i++) assert_int_not_equal(ids[i], tokenizer_unk_id(tok));
    assert_int_equal(ids[0], tokenizer_cls_id(tok));
    assert_int_equal(tokenizer_pad_id(tok), 0);
    tokenizer_free(tok);
    free(v2);
    /* a size cap keeps the specials and the most frequent first */
    v2 = build_vocab(0, 1, 8, &len2, &n2);
    assert_int_equal(n2, 8);
    assert_true(has_line(v2, "[MASK]"));
    free(v2);
    vocab_builder *vb;
    assert_int_equal(vocab_builder_create(1, &vb, err), SM_OK);
    assert_int_equal(vocab_builder_build(vb, 0, 0, &v2, &len2, &n2, err), SM_ERR_INVALID);
    assert_null(v2);
    vocab_builder_free(vb);
    free(v);
}

static void test_scratch_model(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    size_t vlen;
    int nv;
    char *vocab = build_vocab(0, 1, 0, &vlen, &nv);
    const char *labels[] = {"negative", "positive"};
    bert_shape shape = {2, 32, 4, 64, 32};
    bert_model *m;
    int rc = bert_model_create_scratch(&shape, vocab, vlen, 1, 2, labels, 3, &m, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_int_equal(m->cfg.vocab_size, nv);
    assert_int_equal(m->cfg.max_position_embeddings, 32);
    assert_true(m->p.emb_ln_w[0] == 1.0f && m->p.layers[1].ffn_in_b[0] == 0.0f);

    train_dataset *ds;
    assert_int_equal(train_dataset_create(m->cfg.vocab_size, &ds, err), SM_OK);
    static const int label_of[] = {1, 0, 1, 1, 1, 1, 0, 1};
    for (int rep = 0; rep < 4; rep++)
        for (int i = 0; i < N_TEXTS; i++) {
            int ids[32], n, cut;
            assert_int_equal(tokenizer_encode(m->tok, k_texts[i], strlen(k_texts[i]), 32, ids, &n,
                                              &cut, err), SM_OK);
            assert_int_equal(train_dataset_add(ds, ids, n, label_of[i], err), SM_OK);
        }
    backend *be = cpu_backend(1);
    trainer_options o;
    trainer_options_default(&o);
    o.loop.epochs = 6;
    o.loop.lr = 1e-3f;
    o.loop.batch_size = 8;
    o.loop.valid_fraction = 0;
    trainer_result r;
    rc = trainer_run(m, be, ds, &o, &r, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_int_equal(r.best_epoch, 6); /* no split: the last epoch */
    assert_true(isnan(r.best_accuracy));
    assert_true(r.train_loss[5] < r.train_loss[0]);
    print_message("scratch model: %d tokens, loss %.4f -> %.4f\n", nv, r.train_loss[0],
                  r.train_loss[5]);

    /* It stores and loads like any model. */
    char *cfg_json;
    void *st;
    size_t st_len;
    assert_int_equal(bert_config_to_json(&m->cfg, &cfg_json, err), SM_OK);
    assert_int_equal(bert_model_save_safetensors(m, ST_F32, &st, &st_len, err), SM_OK);
    bert_model *m2;
    rc = bert_model_load_buffers(cfg_json, strlen(cfg_json), vocab, vlen, st, st_len, &m2, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_int_equal(m2->n_floats, m->n_floats);
    assert_memory_equal(m2->arena, m->arena, m->n_floats * sizeof(float));
    bert_model_free(m2);
    free(st);
    free(cfg_json);
    trainer_result_free(&r);
    train_dataset_free(ds);
    be->destroy(be);
    bert_model_free(m);
    free(vocab);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_gradients_and_losses),
        cmocka_unit_test(test_gradient_accumulation),
        cmocka_unit_test(test_dropout_reproducible_and_off_in_eval),
        cmocka_unit_test(test_clipping),
        cmocka_unit_test(test_adamw_op),
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_distill_golden),
        cmocka_unit_test(test_distill_limits),
        cmocka_unit_test(test_distill_dataset),
        cmocka_unit_test(test_trainer_learns),
        cmocka_unit_test(test_trainer_distills),
        cmocka_unit_test(test_trainer_deterministic),
        cmocka_unit_test(test_trainer_interrupt_and_nan),
        cmocka_unit_test(test_prepare_head),
        cmocka_unit_test(test_vocab_builder),
        cmocka_unit_test(test_scratch_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
