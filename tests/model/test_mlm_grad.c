/* test_mlm_grad.c: the pretraining ops and the MLM head against central
 * finite differences, in the manner of test_grad.c.
 *
 * gather_rows and scatter_rows: a double-precision reference, L = Σ r·out
 * with random r, |ours - fd| <= 1e-3 * max(|fd|, rms of fd). The head on
 * its own (gathered rows -> dense -> GELU -> LayerNorm -> tied decoder ->
 * cross-entropy) in double against the backend's float backward. Then the
 * whole tiny MLM model with dropout on, w.r.t. the largest and a random
 * element of every tensor, head and tied embeddings included (float forward,
 * looser tolerance).
 */
#define GRAD_SEED 777
#include "support/grad_test_util.h"

#include "encoder/bert.h"
#include "train/bert_mlm.h"
#include "train/bert_train.h"
#include "train/pretrain.h"

/* ---- gather_rows / scatter_rows -------------------------------------------- */

typedef struct gather_ctx {
    int M, N, C;
    const int *rows;
    double *x, *r;
} gather_ctx;

static double gather_loss(void *p)
{
    gather_ctx *c = p;
    double s = 0;
    for (int i = 0; i < c->M; i++)
        for (int k = 0; k < c->C; k++) s += c->r[i * c->C + k] * c->x[c->rows[i] * c->C + k];
    return s;
}

static void test_gather_scatter(void **state)
{
    (void)state;
    int N = 12, C = 5, M = 4, rows[4] = {7, 0, 11, 3};
    float *x = frand((size_t)N * C, 1), *r = frand((size_t)M * C, 1);
    float out[4 * 5], dx[12 * 5];
    assert_int_equal(g_be->gather_rows(g_be, out, x, rows, M, C), SM_OK);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < C; k++) assert_true(out[i * C + k] == x[rows[i] * C + k]);
    for (int i = 0; i < N * C; i++) dx[i] = 123.0f; /* written, not accumulated */
    assert_int_equal(g_be->scatter_rows(g_be, dx, r, rows, M, N, C), SM_OK);
    gather_ctx c = {M, N, C, rows, to_double(x, (size_t)N * C), to_double(r, (size_t)M * C)};
    check_grad("gather_rows d(x)", c.x, (size_t)N * C, dx, gather_loss, &c);
    free(c.x);
    free(c.r);
    free(x);
    free(r);
}

/* ---- the head alone, in double ------------------------------------------------ */

typedef struct head_ctx {
    int M, C, V;
    const int *labels;
    double *hm, *dw, *db, *lw, *lb, *wemb, *bias;
    double scale, eps;
} head_ctx;

static double head_loss(void *p)
{
    head_ctx *c = p;
    int C = c->C, V = c->V;
    double *u = malloc((size_t)C * sizeof *u), *y = malloc((size_t)C * sizeof *y);
    double total = 0;
    for (int i = 0; i < c->M; i++) {
        for (int o = 0; o < C; o++) {
            double s = c->db[o];
            for (int k = 0; k < C; k++) s += c->hm[i * C + k] * c->dw[o * C + k];
            u[o] = 0.5 * s * (1 + erf(s / sqrt(2.0)));
        }
        double mu = 0, var = 0;
        for (int k = 0; k < C; k++) mu += u[k];
        mu /= C;
        for (int k = 0; k < C; k++) var += (u[k] - mu) * (u[k] - mu);
        var /= C;
        for (int k = 0; k < C; k++) y[k] = (u[k] - mu) / sqrt(var + c->eps) * c->lw[k] + c->lb[k];
        double mx = -INFINITY, z_lab = 0, se = 0;
        double *z = malloc((size_t)V * sizeof *z);
        for (int v = 0; v < V; v++) {
            double s = c->bias[v];
            for (int k = 0; k < C; k++) s += y[k] * c->wemb[v * C + k];
            z[v] = s;
            mx = s > mx ? s : mx;
        }
        for (int v = 0; v < V; v++) se += exp(z[v] - mx);
        z_lab = z[c->labels[i]];
        total += log(se) + mx - z_lab;
        free(z);
    }
    free(u);
    free(y);
    return c->scale * total;
}

/* The whole MLM head through bert_mlm_forward/backward would need the
 * encoder; here it is composed from the same backend calls on random data
 * and compared with the double reference above. */
static void test_head(void **state)
{
    (void)state;
    int M = 3, C = 8, V = 11, labels[3] = {4, 0, 10};
    float eps = 1e-12f, scale = 1.0f / M;
    float *hm = frand((size_t)M * C, 1), *dw = frand((size_t)C * C, 0.5), *db = frand(C, 0.2);
    float *lw = frand(C, 1), *lb = frand(C, 0.2), *wemb = frand((size_t)V * C, 0.5);
    float *bias = frand(V, 0.2);
    for (int k = 0; k < C; k++) lw[k] += 1.0f;
    float t[24], u[24], y[24], mean[3], rstd[3], logits[33], probs[33], losses[3];
    backend *be = g_be;
    assert_int_equal(be->linear(be, t, hm, dw, db, M, C, C), SM_OK);
    assert_int_equal(be->gelu(be, u, t, (size_t)M * C), SM_OK);
    assert_int_equal(be->layernorm(be, y, mean, rstd, u, lw, lb, M, C, eps), SM_OK);
    assert_int_equal(be->linear(be, logits, y, wemb, bias, M, C, V), SM_OK);
    assert_int_equal(be->cross_entropy(be, losses, probs, logits, labels, M, V), SM_OK);
    float *g_dw = calloc((size_t)C * C, sizeof(float)), *g_db = calloc(C, sizeof(float));
    float *g_lw = calloc(C, sizeof(float)), *g_lb = calloc(C, sizeof(float));
    float *g_wemb = calloc((size_t)V * C, sizeof(float)), *g_bias = calloc(V, sizeof(float));
    float dlogits[33], dy[24], dhm[24];
    assert_int_equal(be->cross_entropy_backward(be, dlogits, probs, labels, M, V, scale), SM_OK);
    assert_int_equal(be->linear_backward(be, dy, g_wemb, g_bias, dlogits, y, wemb, M, C, V, 0),
                     SM_OK);
    assert_int_equal(be->layernorm_backward(be, dy, g_lw, g_lb, dy, u, mean, rstd, lw, M, C),
                     SM_OK);
    assert_int_equal(be->gelu_backward(be, dy, dy, t, (size_t)M * C), SM_OK);
    assert_int_equal(be->linear_backward(be, dhm, g_dw, g_db, dy, hm, dw, M, C, C, 0), SM_OK);

    head_ctx c = {M, C, V, labels, to_double(hm, (size_t)M * C), to_double(dw, (size_t)C * C),
                  to_double(db, C), to_double(lw, C), to_double(lb, C),
                  to_double(wemb, (size_t)V * C), to_double(bias, V), scale, eps};
    double want = head_loss(&c), got = 0;
    for (int i = 0; i < M; i++) got += losses[i] * (double)scale;
    assert_true(fabs(got - want) <= 1e-5 * (1 + fabs(want)));
    check_grad("MLM head d(hidden rows)", c.hm, (size_t)M * C, dhm, head_loss, &c);
    check_grad("MLM head d(dense.weight)", c.dw, (size_t)C * C, g_dw, head_loss, &c);
    check_grad("MLM head d(dense.bias)", c.db, C, g_db, head_loss, &c);
    check_grad("MLM head d(LayerNorm.weight)", c.lw, C, g_lw, head_loss, &c);
    check_grad("MLM head d(LayerNorm.bias)", c.lb, C, g_lb, head_loss, &c);
    check_grad("MLM head d(decoder = word_emb)", c.wemb, (size_t)V * C, g_wemb, head_loss, &c);
    check_grad("MLM head d(predictions.bias)", c.bias, V, g_bias, head_loss, &c);
    double *arrs[] = {c.hm, c.dw, c.db, c.lw, c.lb, c.wemb, c.bias};
    for (size_t i = 0; i < sizeof arrs / sizeof *arrs; i++) free(arrs[i]);
    float *fl[] = {hm, dw, db, lw, lb, wemb, bias, g_dw, g_db, g_lw, g_lb, g_wemb, g_bias};
    for (size_t i = 0; i < sizeof fl / sizeof *fl; i++) free(fl[i]);
}

/* ---- the whole tiny MLM model, dropout on ---------------------------------------- */

typedef struct model_ctx {
    bert_model *m;
    bert_mlm_head *h;
    bert_mlm_ws *ws;
    float *params;
    bert_params p;
    bert_mlm_params hp;
    int ids[4 * 12], lengths[4], labels[4 * 12], B, T, P;
    bert_dropout drop;
} model_ctx;

static double model_loss(model_ctx *c)
{
    char err[SM_ERR_MAX] = "";
    double loss;
    int n;
    int rc = bert_mlm_forward(&c->m->cfg, &c->p, &c->hp, c->ws, c->ids, c->lengths, c->labels,
                              c->B, c->T, &c->drop, &loss, &n, err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(n, c->P);
    return loss / c->P;
}

static void test_whole_model(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    model_ctx c = {.B = 4, .T = 12};
    assert_int_equal(bert_mlm_load_dir("tests/fixtures/mlm/model", 1, &c.m, &c.h, err), SM_OK);
    assert_int_equal(bert_mlm_ws_create(g_be, &c.m->cfg, c.B, c.T, c.B * c.T, &c.ws, err), SM_OK);
    bert_param_spec *specs;
    int n;
    size_t total, head_off;
    assert_int_equal(pretrain_param_table(&c.m->cfg, &specs, &n, &total, &head_off, err), SM_OK);
    c.params = malloc(total * sizeof *c.params);
    memcpy(c.params, c.m->arena, head_off * sizeof(float));
    memcpy(c.params + head_off, c.h->arena, c.h->n_floats * sizeof(float));
    assert_int_equal(bert_params_bind(&c.m->cfg, 0, c.params, &c.p, err), SM_OK);
    bert_mlm_params_bind(&c.m->cfg, c.params + head_off, &c.hp);
    int lens[4] = {12, 7, 3, 9};
    for (int b = 0; b < c.B; b++) {
        c.lengths[b] = lens[b];
        for (int t = 0; t < c.T; t++) {
            int i = b * c.T + t, inside = t > 0 && t < lens[b] - 1;
            c.ids[i] = t == 0 ? 2 : t == lens[b] - 1 ? 3 : t < lens[b] ? 500 + (b * 37 + t * 11) % 600 : 0;
            c.labels[i] = inside && (t + b) % 3 == 0 ? 510 + (b * 13 + t) % 400 : MLM_IGNORE;
            if (inside && (t + b) % 3 == 0 && t % 2) c.ids[i] = 4; /* [MASK] */
            c.P += c.labels[i] != MLM_IGNORE;
        }
    }
    c.drop = (bert_dropout){0.1f, 0.1f, 0.1f, 7, 3};

    float *grads = calloc(total, sizeof *grads);
    bert_params g;
    bert_mlm_params hg;
    assert_int_equal(bert_params_bind(&c.m->cfg, 0, grads, &g, err), SM_OK);
    bert_mlm_params_bind(&c.m->cfg, grads + head_off, &hg);
    model_loss(&c);
    assert_int_equal(bert_mlm_backward(&c.m->cfg, &c.p, &c.hp, &g, &hg, c.ws, 1.0f / c.P, err),
                     SM_OK);
    double worst = 0;
    int checked = 0;
    for (int i = 0; i < n; i++) {
        size_t best = 0;
        for (size_t k = 0; k < specs[i].numel; k++)
            if (fabsf(grads[specs[i].offset + k]) > fabsf(grads[specs[i].offset + best])) best = k;
        size_t pick[2] = {best, (size_t)((urand() + 1) / 2 * (double)specs[i].numel)};
        for (int j = 0; j < 2; j++) {
            size_t at = specs[i].offset + (pick[j] < specs[i].numel ? pick[j] : 0);
            float save = c.params[at], h = 1e-2f;
            c.params[at] = save + h;
            double lp = model_loss(&c);
            c.params[at] = save - h;
            double lm = model_loss(&c);
            c.params[at] = save;
            double fd = (lp - lm) / (2.0 * h), a = grads[at];
            double err_abs = fabs(a - fd);
            if (!(err_abs <= 2e-2 * fabs(fd) + 3e-5))
                fail_msg("MLM model d(%s)[%zu]: backward %.7g, finite difference %.7g",
                         specs[i].name, at - specs[i].offset, a, fd);
            if (fabs(fd) > 1e-3 && err_abs / fabs(fd) > worst) worst = err_abs / fabs(fd);
            checked++;
        }
    }
    print_message("  whole MLM model (dropout 0.1) %4d parameters, worst relative %.1e\n", checked,
                  worst);
    free(specs);
    bert_params_release(&g);
    bert_params_release(&c.p);
    free(grads);
    free(c.params);
    bert_mlm_ws_free(c.ws);
    bert_mlm_head_free(c.h);
    bert_model_free(c.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_scatter),
        cmocka_unit_test(test_head),
        cmocka_unit_test(test_whole_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
