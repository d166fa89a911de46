/* test_mlm.c: masked-language-model pretraining against PyTorch, and the
 * pretraining loop's promises.
 *
 * tests/fixtures/gen_mlm_golden.py saved a tiny random BertForMaskedLM as
 * transformers writes it (no pooler, decoder tied to the word embeddings), a
 * padded batch with fixed masked inputs and labels, the MLM loss and every
 * parameter gradient of one forward/backward, and the losses of 10 AdamW
 * steps. Ours must match: every gradient element within 1e-3 relative
 * (|ours - torch| <= 1e-3 * max(|torch|, rms of that tensor, 1e-6 * largest
 * gradient)), the tied word embeddings included, every loss within 1e-4.
 * Then: masking statistics and reproducibility, micro-batches summing to
 * the batch, the loop learning, determinism, interrupts, NaN, bad options,
 * and saving a pretrained encoder that fine-tuning then starts from.
 */
#include "cpu/backend_cpu.h"
#include "support/train_test_util.h"

#include "core/errors.h"
#include "core/rng.h"
#include "encoder/bert.h"
#include "format/safetensors.h"
#include "train/bert_mlm.h"
#include "train/bert_train.h"
#include "train/optimizer.h"
#include "train/pretrain.h"
#include "train/trainer.h"

#define GOLDEN "tests/fixtures/mlm"

typedef struct batch {
    int B, T;
    int ids[MAX_EX * MAX_T];
    int labels[MAX_EX * MAX_T];
    int lengths[MAX_EX];
} batch;

static void load_model(bert_model **m, bert_mlm_head **h)
{
    char err[SM_ERR_MAX] = "";
    int rc = bert_mlm_load_dir(GOLDEN "/model", 1, m, h, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_non_null(*h);
    assert_int_equal((*m)->has_head, 0);
}

static int parse_ints(char *s, int *out, int cap)
{
    int n = 0;
    for (char *tok = strtok(s, " \n"); tok; tok = strtok(NULL, " \n")) {
        assert_true(n < cap);
        out[n++] = atoi(tok);
    }
    return n;
}

static void load_batch(const bert_model *m, batch *bt)
{
    FILE *f = fopen(GOLDEN "/batch.txt", "r");
    assert_non_null(f);
    char line[4096];
    int raw[MAX_EX][MAX_T], lab[MAX_EX][MAX_T];
    memset(bt, 0, sizeof *bt);
    while (fgets(line, sizeof line, f)) {
        assert_true(bt->B < MAX_EX);
        int b = bt->B++;
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = 0;
        int n = parse_ints(line, raw[b], MAX_T);
        assert_int_equal(parse_ints(tab + 1, lab[b], MAX_T), n);
        bt->lengths[b] = n;
        if (n > bt->T) bt->T = n;
    }
    fclose(f);
    int pad = tokenizer_pad_id(m->tok);
    for (int b = 0; b < bt->B; b++)
        for (int t = 0; t < bt->T; t++) {
            int in = t < bt->lengths[b];
            bt->ids[b * bt->T + t] = in ? raw[b][t] : pad;
            bt->labels[b * bt->T + t] = in ? lab[b][t] : MLM_IGNORE;
        }
}

/* The pretraining arena on the CPU: encoder + head parameters and
 * gradients, laid out by pretrain_param_table, with views. */
typedef struct trainable {
    bert_model *m;
    bert_mlm_head *h;
    backend *be;
    bert_mlm_ws *ws;
    bert_param_spec *specs; /* what the optimizer updates */
    int n_specs;
    size_t total, head_offset;
    float *params, *grads;
    bert_params p, g;
    bert_mlm_params hp, hg;
} trainable;

static void trainable_init(trainable *tr, int threads, int max_batch, int max_seq)
{
    char err[SM_ERR_MAX] = "";
    memset(tr, 0, sizeof *tr);
    load_model(&tr->m, &tr->h);
    assert_int_equal(backend_cpu_create(threads, &tr->be, err), SM_OK);
    int rc = bert_mlm_ws_create(tr->be, &tr->m->cfg, max_batch, max_seq, max_batch * max_seq,
                                &tr->ws, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_int_equal(pretrain_param_table(&tr->m->cfg, &tr->specs, &tr->n_specs, &tr->total,
                                          &tr->head_offset, err), SM_OK);
    tr->params = calloc(tr->total, sizeof *tr->params);
    tr->grads = calloc(tr->total, sizeof *tr->grads);
    memcpy(tr->params, tr->m->arena, tr->head_offset * sizeof(float));
    memcpy(tr->params + tr->head_offset, tr->h->arena, tr->h->n_floats * sizeof(float));
    assert_int_equal(bert_params_bind(&tr->m->cfg, 0, tr->params, &tr->p, err), SM_OK);
    assert_int_equal(bert_params_bind(&tr->m->cfg, 0, tr->grads, &tr->g, err), SM_OK);
    bert_mlm_params_bind(&tr->m->cfg, tr->params + tr->head_offset, &tr->hp);
    bert_mlm_params_bind(&tr->m->cfg, tr->grads + tr->head_offset, &tr->hg);
}

static void trainable_free(trainable *tr)
{
    bert_params_release(&tr->p);
    bert_params_release(&tr->g);
    free(tr->params);
    free(tr->grads);
    free(tr->specs);
    bert_mlm_ws_free(tr->ws);
    tr->be->destroy(tr->be);
    bert_mlm_head_free(tr->h);
    bert_model_free(tr->m);
}

/* Forward + backward of examples [first, first+B) with loss scale `scale`;
 * returns the loss sum, *n the predicted count. */
static double fwd_bwd(trainable *tr, const batch *bt, int first, int B, float scale,
                      const bert_dropout *drop, int *n)
{
    char err[SM_ERR_MAX] = "";
    double loss;
    int T = bt->T, got;
    int rc = bert_mlm_forward(&tr->m->cfg, &tr->p, &tr->hp, tr->ws, bt->ids + first * T,
                              bt->lengths + first, bt->labels + first * T, B, T, drop, &loss,
                              &got, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    rc = bert_mlm_backward(&tr->m->cfg, &tr->p, &tr->hp, &tr->g, &tr->hg, tr->ws, scale, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    if (n) *n = got;
    return loss;
}

static int count_labels(const batch *bt, int first, int B)
{
    int n = 0;
    for (int i = first * bt->T; i < (first + B) * bt->T; i++) n += bt->labels[i] != MLM_IGNORE;
    return n;
}

/* Worst relative difference of every golden tensor; fails listing those off.
 * The pooler, absent from BertForMaskedLM, must have a zero gradient. */
static double compare_grads(const trainable *tr, const char *path, double tol)
{
    char err[SM_ERR_MAX] = "";
    safetensors st;
    assert_int_equal(safetensors_open_file(path, &st, err), SM_OK);
    bert_param_spec *enc, *head;
    int ne, nh;
    size_t te, th;
    assert_int_equal(bert_param_table(&tr->m->cfg, 0, &enc, &ne, &te, err), SM_OK);
    assert_int_equal(bert_mlm_param_table(&tr->m->cfg, &head, &nh, &th, err), SM_OK);
    assert_int_equal(te, tr->head_offset);
    int n = ne + nh, bad = 0, compared = 0;
    double gmax = 0, worst = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const bert_param_spec *s = i < ne ? &enc[i] : &head[i - ne];
            size_t off = s->offset + (i < ne ? 0 : te);
            char name[160];
            snprintf(name, sizeof name, "%s%s", i < ne ? "bert." : "", s->name);
            if (!strncmp(s->name, "pooler.", 7)) {
                if (pass)
                    for (size_t k = 0; k < s->numel; k++) assert_true(tr->grads[off + k] == 0.0f);
                continue;
            }
            const st_tensor *t = safetensors_find(&st, name);
            if (!t) fail_msg("golden gradient '%s' missing", name);
            assert_int_equal((size_t)t->numel, s->numel);
            float *want = malloc(s->numel * sizeof *want);
            assert_int_equal(st_tensor_to_f32(t, want, err), SM_OK);
            if (!pass) {
                double a = max_abs(want, s->numel);
                if (a > gmax) gmax = a;
                free(want);
                continue;
            }
            double tw = check_tensor(name, tr->grads + off, want, s->numel, gmax, tol, &bad);
            if (tw > worst || isnan(tw)) worst = tw;
            compared++;
            free(want);
        }
    assert_int_equal(compared, st.n_tensors); /* every golden tensor was compared */
    free(enc);
    free(head);
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
    int P = count_labels(&bt, 0, bt.B), got;
    assert_true(P > 20);

    double loss = fwd_bwd(&tr, &bt, 0, bt.B, 1.0f / (float)P, NULL, &got) / P;
    assert_int_equal(got, P);
    double worst = compare_grads(&tr, GOLDEN "/grads.safetensors", GRAD_TOL);
    print_message("golden: %d predicted positions, loss %.7f (torch %.7f), worst gradient "
                  "relative difference %.2e\n",
                  P, loss, g.losses[0], worst);
    assert_true(fabs(loss - g.losses[0]) <= LOSS_TOL);

    /* 10 AdamW steps from the start, as the script did (the pooler, absent
     * there, is not updated). */
    trainable_free(&tr);
    trainable_init(&tr, 2, MAX_EX, MAX_T);
    float *pooler = malloc((size_t)tr.m->cfg.hidden_size * sizeof *pooler);
    memcpy(pooler, tr.p.pool_w, (size_t)tr.m->cfg.hidden_size * sizeof *pooler);
    adamw *opt;
    assert_int_equal(adamw_create_table(tr.be, tr.specs, tr.n_specs, tr.total, &opt, err), SM_OK);
    adamw_hparams h = {g.lr, g.beta1, g.beta2, g.eps, g.wd, g.clip, 0.0f}; /* head at lr */
    double worst_loss = 0;
    for (int s = 0; s < g.steps; s++) {
        memset(tr.grads, 0, tr.total * sizeof *tr.grads);
        double l = fwd_bwd(&tr, &bt, 0, bt.B, 1.0f / (float)P, NULL, NULL) / P;
        float norm;
        float lr = lr_linear_schedule(g.lr, s, g.warmup, g.steps);
        int rc = adamw_step(opt, tr.params, tr.grads, &h, lr, &norm, err);
        if (rc) print_error("%s\n", err);
        assert_int_equal(rc, SM_OK);
        if (s == 0) assert_true(fabs(norm - g.grad_norm) <= 1e-4 * g.grad_norm);
        double d = fabs(l - g.losses[s]);
        if (d > worst_loss) worst_loss = d;
        if (!(d <= LOSS_TOL)) fail_msg("step %d: loss %.7f, torch %.7f", s, l, g.losses[s]);
    }
    assert_memory_equal(pooler, tr.p.pool_w, (size_t)tr.m->cfg.hidden_size * sizeof *pooler);
    print_message("golden: %d AdamW steps, worst loss difference %.2e (last %.6f)\n", g.steps,
                  worst_loss, g.losses[g.steps - 1]);
    free(pooler);
    adamw_free(opt);
    trainable_free(&tr);
}

/* Micro-batches add up: the batch in one pass == two halves with the same
 * scale (one of the halves holds an example with nothing predicted). */
static void test_gradient_accumulation(void **state)
{
    (void)state;
    trainable a, b;
    batch bt;
    trainable_init(&a, 2, MAX_EX, MAX_T);
    trainable_init(&b, 2, MAX_EX, MAX_T);
    load_batch(a.m, &bt);
    assert_int_equal(bt.B, 8);
    int P = count_labels(&bt, 0, 8);
    double la = fwd_bwd(&a, &bt, 0, 8, 1.0f / P, NULL, NULL);
    double lb = fwd_bwd(&b, &bt, 0, 4, 1.0f / P, NULL, NULL) +
                fwd_bwd(&b, &bt, 4, 4, 1.0f / P, NULL, NULL);
    assert_true(fabs(la - lb) <= 1e-5 * fabs(la));
    double worst = max_abs_diff(a.grads, b.grads, a.total);
    double rms = rms_of(a.grads, a.total);
    print_message("accumulation: max |full - 2 x half| %.2e (gradient rms %.2e)\n", worst, rms);
    assert_true(worst <= 1e-4 * rms + 1e-9);
    /* A micro-batch with nothing predicted: loss 0, no gradient. */
    memset(b.grads, 0, b.total * sizeof *b.grads);
    int n;
    assert_int_equal(count_labels(&bt, 3, 1), 0);
    assert_true(fwd_bwd(&b, &bt, 3, 1, 1.0f, NULL, &n) == 0.0);
    assert_int_equal(n, 0);
    for (size_t i = 0; i < b.total; i++) assert_true(b.grads[i] == 0.0f);
    trainable_free(&a);
    trainable_free(&b);
}

static void test_forward_errors(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    trainable tr;
    batch bt;
    trainable_init(&tr, 1, MAX_EX, MAX_T);
    load_batch(tr.m, &bt);
    double l;
    int n;
    const bert_config *cfg = &tr.m->cfg;
    /* backward first */
    assert_int_equal(bert_mlm_backward(cfg, &tr.p, &tr.hp, &tr.g, &tr.hg, tr.ws, 1, err),
                     SM_ERR_INVALID);
    bt.labels[3 * bt.T + bt.T - 1] = 600; /* example 3 is short: a padding position */
    assert_int_equal(bert_mlm_forward(cfg, &tr.p, &tr.hp, tr.ws, bt.ids, bt.lengths, bt.labels,
                                      bt.B, bt.T, NULL, &l, &n, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "padding"));
    bt.labels[3 * bt.T + bt.T - 1] = MLM_IGNORE;
    bt.labels[1] = cfg->vocab_size;
    assert_int_equal(bert_mlm_forward(cfg, &tr.p, &tr.hp, tr.ws, bt.ids, bt.lengths, bt.labels,
                                      bt.B, bt.T, NULL, &l, &n, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "label 3130"));
    trainable_free(&tr);
    /* more predicted positions than the workspace holds */
    bert_model *m;
    bert_mlm_head *h;
    load_model(&m, &h);
    backend *be = cpu_backend(1);
    bert_mlm_ws *ws;
    assert_int_equal(bert_mlm_ws_create(be, &m->cfg, MAX_EX, MAX_T, 0, &ws, err), SM_ERR_INVALID);
    assert_int_equal(bert_mlm_ws_create(be, &m->cfg, MAX_EX, MAX_T, 5, &ws, err), SM_OK);
    load_batch(m, &bt);
    bert_mlm_params hp;
    bert_mlm_params_bind(&m->cfg, h->arena, &hp);
    assert_int_equal(bert_mlm_forward(&m->cfg, &m->p, &hp, ws, bt.ids, bt.lengths, bt.labels,
                                      bt.B, bt.T, NULL, &l, &n, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "more than 5"));
    bert_mlm_ws_free(ws);
    be->destroy(be);
    bert_mlm_head_free(h);
    bert_model_free(m);
}

/* ---- masking --------------------------------------------------------------- */

static void test_masking(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m;
    bert_mlm_head *h;
    load_model(&m, &h);
    mlm_masking mk;
    assert_int_equal(mlm_masking_init(m->tok, &mk, err), SM_OK);
    assert_int_equal(mk.n_special, 5);
    assert_int_equal(mk.mask_id, 4);
    enum { N = 200000 };
    int *ids = malloc(N * sizeof *ids), *in = malloc(N * sizeof *in), *lab = malloc(N * sizeof *lab);
    int *in2 = malloc(N * sizeof *in2), *lab2 = malloc(N * sizeof *lab2);
    uint64_t s = 99;
    long normal = 0;
    for (int i = 0; i < N; i++) {
        s = rng_mix64(s);
        ids[i] = i % 10 == 0 ? (int)(s % 5) : 5 + (int)(s % (uint64_t)(m->cfg.vocab_size - 5));
        normal += ids[i] >= 5;
    }
    int count = mlm_mask(&mk, 1234, ids, N, in, lab);
    long masked = 0, as_mask = 0, kept = 0, random = 0, specials_hit = 0;
    long random_hist[4] = {0};
    for (int i = 0; i < N; i++) {
        if (lab[i] == MLM_IGNORE) {
            assert_int_equal(in[i], ids[i]);
            continue;
        }
        masked++;
        assert_int_equal(lab[i], ids[i]);
        specials_hit += ids[i] < 5;
        if (in[i] == mk.mask_id) as_mask++;
        else if (in[i] == ids[i]) kept++;
        else {
            random++;
            random_hist[(long)in[i] * 4 / m->cfg.vocab_size]++;
        }
    }
    assert_int_equal(count, masked);
    assert_int_equal(specials_hit, 0);
    double f = (double)masked / normal;
    print_message("masking: %.4f of %ld maskable predicted; [MASK] %.4f, unchanged %.4f, random "
                  "%.4f\n",
                  f, normal, (double)as_mask / masked, (double)kept / masked,
                  (double)random / masked);
    assert_true(fabs(f - 0.15) < 0.004);
    assert_true(fabs((double)as_mask / masked - 0.8) < 0.01);
    assert_true(fabs((double)kept / masked - 0.1) < 0.008);
    assert_true(fabs((double)random / masked - 0.1) < 0.008);
    for (int q = 0; q < 4; q++) assert_true(fabs(random_hist[q] / (double)random - 0.25) < 0.03);
    /* reproducible, a function of (key, position): a prefix masks alike */
    assert_int_equal(mlm_mask(&mk, 1234, ids, 1000, in2, lab2) > 0, 1);
    assert_memory_equal(in, in2, 1000 * sizeof *in);
    assert_memory_equal(lab, lab2, 1000 * sizeof *lab);
    mlm_mask(&mk, 1235, ids, N, in2, lab2);
    assert_memory_not_equal(lab, lab2, N * sizeof *lab);
    /* all [MASK], and none replaced */
    mk.prob = 0.5f;
    mk.mask_frac = 1.0f;
    mk.random_frac = 0.0f;
    mlm_mask(&mk, 7, ids, N, in, lab);
    for (int i = 0; i < N; i++) assert_true(lab[i] == MLM_IGNORE || in[i] == mk.mask_id);
    mk.mask_frac = 0.0f;
    mlm_mask(&mk, 7, ids, N, in, lab);
    for (int i = 0; i < N; i++) assert_true(lab[i] == MLM_IGNORE || in[i] == ids[i]);
    free(ids);
    free(in);
    free(lab);
    free(in2);
    free(lab2);
    bert_mlm_head_free(h);
    bert_model_free(m);
}

/* ---- the loop ------------------------------------------------------------------ */

/* Rows whose tokens the context reveals: each row repeats one token (of
 * 30), so a masked position is predictable from any other. */
static pretrain_dataset *synthetic(int vocab, int rows, uint64_t seed)
{
    char err[SM_ERR_MAX] = "";
    pretrain_dataset *ds;
    assert_int_equal(pretrain_dataset_create(vocab, &ds, err), SM_OK);
    uint64_t s = seed;
    int ids[40];
    for (int r = 0; r < rows; r++) {
        s = rng_mix64(s);
        int n = 8 + (int)(s % 20), period = 1, motif[3];
        for (int k = 0; k < 3; k++) motif[k] = 600 + (int)((rng_mix64(s + k) >> 20) % 30);
        ids[0] = 2;
        for (int t = 1; t < n - 1; t++) ids[t] = motif[(t - 1) % period];
        ids[n - 1] = 3;
        assert_int_equal(pretrain_dataset_add(ds, ids, n, err), SM_OK);
    }
    return ds;
}

static int count_progress(void *user, const pretrain_progress *p)
{
    counter *c = user;
    c->calls++;
    c->last_step = p->loop.step;
    if (p->loop.epoch_done) c->epochs_seen++;
    else c->predicted += p->loop.denom;
    return 0;
}

static void test_pretrain_learns(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = cpu_backend(1);
    bert_model *m;
    bert_mlm_head *h;
    load_model(&m, &h);
    pretrain_dataset *ds = synthetic(m->cfg.vocab_size, 400, 5);
    pretrain_options o;
    pretrain_options_default(&o);
    o.loop.epochs = 8;
    o.loop.lr = 3e-3f;
    o.loop.batch_size = 16;
    o.loop.valid_fraction = 0.1f;
    o.loop.dropout = 0.0f;
    o.mask_prob = 0.2f;
    counter c = {0};
    o.progress = count_progress;
    o.loop.user = &c;
    pretrain_result r;
    int rc = pretrain_run(m, h, be, ds, &o, &r, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_int_equal(r.n_valid, 40);
    assert_int_equal(r.n_train, 360);
    assert_int_equal(r.steps, 8 * 23);
    assert_int_equal(c.epochs_seen, 8);
    assert_int_equal(c.last_step, r.steps);
    assert_int_equal(c.predicted, r.predicted);
    for (int e = 0; e < r.epochs; e++)
        print_message("  epoch %d: MLM loss %.4f, held-out %.4f\n", e + 1, r.train_loss[e],
                      r.valid_loss[e]);
    print_message("  %ld predicted positions, %.2f s, %.0f rows/s\n", r.predicted, r.seconds,
                  r.examples_per_sec);
    /* From about log(3130) to well below log(30) = 3.4, the best a model
     * that ignores the context can do. */
    assert_true(r.train_loss[0] > 6.0);
    assert_true(r.valid_loss[r.epochs - 1] < 2.5);
    assert_true(r.train_loss[r.epochs - 1] < r.train_loss[0]);
    /* max_steps cuts the run short */
    o.loop.max_steps = 7;
    o.loop.valid_fraction = 0;
    o.progress = NULL;
    pretrain_result_free(&r);
    assert_int_equal(pretrain_run(m, h, be, ds, &o, &r, err), SM_OK);
    assert_int_equal(r.steps, 7);
    assert_int_equal(r.epochs, 1);
    assert_true(isnan(r.valid_loss[0]));
    pretrain_result_free(&r);
    pretrain_dataset_free(ds);
    bert_mlm_head_free(h);
    bert_model_free(m);
    be->destroy(be);
}

/* Same seed, dropout on, two threads, accumulation: the same bits; another
 * seed, another model. */
static void test_pretrain_deterministic(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = cpu_backend(2);
    bert_model *m[3];
    bert_mlm_head *h[3];
    for (int i = 0; i < 3; i++) load_model(&m[i], &h[i]);
    pretrain_dataset *ds = synthetic(m[0]->cfg.vocab_size, 48, 3);
    pretrain_options o;
    pretrain_options_default(&o);
    o.loop.epochs = 2;
    o.loop.lr = 1e-3f;
    o.loop.batch_size = 16;
    o.loop.accumulation = 2;
    o.loop.dropout = 0.1f;
    pretrain_result r[3];
    for (int i = 0; i < 3; i++) {
        o.loop.seed = i < 2 ? 5 : 6;
        int rc = pretrain_run(m[i], h[i], be, ds, &o, &r[i], err);
        if (rc) print_error("%s\n", err);
        assert_int_equal(rc, SM_OK);
    }
    assert_memory_equal(m[0]->arena, m[1]->arena, m[0]->n_floats * sizeof(float));
    assert_memory_equal(h[0]->arena, h[1]->arena, h[0]->n_floats * sizeof(float));
    assert_memory_equal(r[0].train_loss, r[1].train_loss, 2 * sizeof(double));
    assert_memory_not_equal(m[0]->arena, m[2]->arena, m[0]->n_floats * sizeof(float));
    for (int i = 0; i < 3; i++) {
        pretrain_result_free(&r[i]);
        bert_mlm_head_free(h[i]);
        bert_model_free(m[i]);
    }
    pretrain_dataset_free(ds);
    be->destroy(be);
}

static void test_pretrain_interrupt_nan_and_options(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = cpu_backend(2);
    bert_model *m;
    bert_mlm_head *h;
    load_model(&m, &h);
    pretrain_dataset *ds = synthetic(m->cfg.vocab_size, 64, 9);
    float *before = malloc(m->n_floats * sizeof *before);
    float *hbefore = malloc(h->n_floats * sizeof *hbefore);
    memcpy(before, m->arena, m->n_floats * sizeof *before);
    memcpy(hbefore, h->arena, h->n_floats * sizeof *hbefore);
    pretrain_options o;
    pretrain_options_default(&o);
    o.loop.batch_size = 8;
    o.loop.accumulation = 2;
    counter c = {.stop_after = 5};
    o.loop.interrupt = stop_interrupt;
    o.loop.user = &c;
    pretrain_result r;
    assert_int_equal(pretrain_run(m, h, be, ds, &o, &r, err), SM_ERR_INTERRUPTED);
    assert_non_null(strstr(err, "interrupted"));
    assert_int_equal(c.polls, 6);
    assert_memory_equal(before, m->arena, m->n_floats * sizeof *before);
    assert_memory_equal(hbefore, h->arena, h->n_floats * sizeof *hbefore);
    assert_null(r.train_loss);

    /* A NaN in the head: the loss is NaN, reported, nothing changed. */
    o.loop.interrupt = NULL;
    h->p.bias[600] = NAN;
    memcpy(hbefore, h->arena, h->n_floats * sizeof *hbefore);
    assert_int_equal(pretrain_run(m, h, be, ds, &o, &r, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "NaN"));
    assert_memory_equal(before, m->arena, m->n_floats * sizeof *before);
    assert_memory_equal(hbefore, h->arena, h->n_floats * sizeof *hbefore);
    h->p.bias[600] = 0;

    /* Bad options are errors naming the value. */
    pretrain_options_default(&o);
    o.mask_prob = 0;
    assert_int_equal(pretrain_run(m, h, be, ds, &o, &r, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "mask_prob 0"));
    pretrain_options_default(&o);
    o.mask_token_frac = 0.95f;
    assert_int_equal(pretrain_run(m, h, be, ds, &o, &r, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "mask_token_frac"));
    pretrain_options_default(&o);
    o.loop.batch_size = 0;
    assert_int_equal(pretrain_run(m, h, be, ds, &o, &r, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "batch_size 0"));
    int ids[3] = {2, 999999, 3};
    assert_int_equal(pretrain_dataset_add(ds, ids, 3, err), SM_ERR_INVALID);
    free(before);
    free(hbefore);
    pretrain_dataset_free(ds);
    bert_mlm_head_free(h);
    bert_model_free(m);
    be->destroy(be);
}

/* ---- saving, loading, fine-tuning from the result --------------------------- */

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static void test_save_load_finetune(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = cpu_backend(1);
    bert_model *m;
    bert_mlm_head *h;
    load_model(&m, &h);
    pretrain_dataset *ds = synthetic(m->cfg.vocab_size, 32, 4);
    pretrain_options o;
    pretrain_options_default(&o);
    o.loop.batch_size = 8;
    pretrain_result r;
    assert_int_equal(pretrain_run(m, h, be, ds, &o, &r, err), SM_OK);
    pretrain_result_free(&r);

    size_t vlen;
    char *vocab = read_all(GOLDEN "/model/vocab.txt", &vlen), *cfg;
    assert_int_equal(bert_config_to_json(&m->cfg, &cfg, err), SM_OK);
    /* with the head: both come back */
    void *st;
    size_t st_len;
    assert_int_equal(pretrain_save_safetensors(m, h, ST_F32, &st, &st_len, err), SM_OK);
    bert_model *m2;
    bert_mlm_head *h2;
    int rc = bert_mlm_load_buffers(cfg, strlen(cfg), vocab, vlen, st, st_len, 9, &m2, &h2, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_non_null(h2);
    assert_memory_equal(m->arena, m2->arena, m->n_floats * sizeof(float));
    assert_memory_equal(h->arena, h2->arena, h->n_floats * sizeof(float));
    safetensors sf;
    assert_int_equal(safetensors_open_buffer(st, st_len, &sf, err), SM_OK);
    assert_null(safetensors_find(&sf, "cls.predictions.decoder.weight")); /* tied: stored once */
    assert_non_null(safetensors_find(&sf, "cls.predictions.bias"));
    safetensors_close(&sf);
    /* the classification loader takes it as a base (the head ignored) */
    bert_model *base;
    rc = bert_model_load_buffers(cfg, strlen(cfg), vocab, vlen, st, st_len, &base, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_memory_equal(m->arena, base->arena, m->n_floats * sizeof(float));
    bert_model_free(base);
    free(st);
    bert_mlm_head_free(h2);
    bert_model_free(m2);
    /* without the head */
    assert_int_equal(pretrain_save_safetensors(m, NULL, ST_F32, &st, &st_len, err), SM_OK);
    assert_int_equal(bert_mlm_load_buffers(cfg, strlen(cfg), vocab, vlen, st, st_len, 9, &m2, &h2,
                                           err), SM_OK);
    assert_null(h2);
    bert_model_free(m2);
    rc = bert_model_load_buffers(cfg, strlen(cfg), vocab, vlen, st, st_len, &base, err);
    assert_int_equal(rc, SM_OK);
    assert_memory_equal(m->arena, base->arena, m->n_floats * sizeof(float));
    free(st);

    /* fine-tuning starts from it: a fresh classifier, the encoder kept */
    const char *labels[] = {"negative", "positive"};
    int kept;
    assert_int_equal(trainer_prepare_head(base, 2, labels, 1, &kept, err), SM_OK);
    assert_int_equal(kept, 0);
    assert_memory_equal(m->arena, base->arena, m->n_floats * sizeof(float));
    train_dataset *tds;
    assert_int_equal(train_dataset_create(base->cfg.vocab_size, &tds, err), SM_OK);
    for (int i = 0; i < 32; i++) {
        int ids[6] = {2, 600 + i % 7, 620 + i % 5, i % 2 ? 700 : 701, 650, 3};
        assert_int_equal(train_dataset_add(tds, ids, 6, i % 2, err), SM_OK);
    }
    trainer_options to;
    trainer_options_default(&to);
    to.loop.epochs = 2;
    to.loop.batch_size = 8;
    to.loop.valid_fraction = 0;
    trainer_result tr;
    rc = trainer_run(base, be, tds, &to, &tr, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    trainer_result_free(&tr);
    train_dataset_free(tds);
    bert_model_free(base);

    /* A head of the wrong shape is refused, naming the tensor. */
    float z[8] = {0};
    st_write_entry e = {"cls.predictions.bias", z, 1, {8, 0}};
    assert_int_equal(safetensors_serialize(&e, 1, ST_F32, (uint8_t **)&st, &st_len, err), SM_OK);
    assert_int_equal(safetensors_open_buffer(st, st_len, &sf, err), SM_OK);
    assert_int_equal(bert_mlm_head_from_safetensors(&m->cfg, &sf, &h2, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "cls.predictions.transform.dense.weight"));
    safetensors_close(&sf);
    free(st);
    free(cfg);
    free(vocab);
    pretrain_dataset_free(ds);
    bert_mlm_head_free(h);
    bert_model_free(m);
    be->destroy(be);
}

/* A fresh head: transformers' initialisation. */
static void test_fresh_head(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m;
    bert_mlm_head *h, *h1, *h2;
    load_model(&m, &h);
    assert_int_equal(bert_mlm_head_create(&m->cfg, 3, &h1, err), SM_OK);
    assert_int_equal(bert_mlm_head_create(&m->cfg, 3, &h2, err), SM_OK);
    assert_memory_equal(h1->arena, h2->arena, h1->n_floats * sizeof(float));
    int C = m->cfg.hidden_size;
    double ss = 0;
    for (int i = 0; i < C * C; i++) ss += (double)h1->p.dense_w[i] * h1->p.dense_w[i];
    assert_true(fabs(sqrt(ss / (C * C)) - 0.02) < 0.003);
    assert_true(h1->p.ln_w[0] == 1.0f && h1->p.ln_b[0] == 0.0f && h1->p.dense_b[0] == 0.0f);
    for (int v = 0; v < m->cfg.vocab_size; v++) assert_true(h1->p.bias[v] == 0.0f);
    bert_mlm_head_free(h1);
    bert_mlm_head_free(h2);
    bert_mlm_head_free(h);
    bert_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_gradients_and_losses),
        cmocka_unit_test(test_gradient_accumulation),
        cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_masking),
        cmocka_unit_test(test_pretrain_learns),
        cmocka_unit_test(test_pretrain_deterministic),
        cmocka_unit_test(test_pretrain_interrupt_nan_and_options),
        cmocka_unit_test(test_save_load_finetune),
        cmocka_unit_test(test_fresh_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
