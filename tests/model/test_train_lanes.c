/* test_train_lanes.c: a training batch split across CPU threads (lanes,
 * bert_train_lanes.c) against the same batch on one thread.
 *
 * - Loss, logits and every parameter gradient of a step with dropout agree
 *   with one thread's within 1e-6 relative (the masks are the same; only
 *   the order of the weight-gradient sums differs), for 2 and 3 lanes and
 *   batches that do not split evenly, with padding.
 * - Three AdamW steps from the same seed on two threads, twice: the same
 *   losses and parameters, bit for bit.
 * - A batch of one row on a workspace with lanes.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/backend.h"
#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"
#include "train/bert_train.h"
#include "train/optimizer.h"
#include "train/trainer.h"

enum { V = 300, B_MAX = 7, T = 24 };

static bert_model *scratch_model(void)
{
    static char vocab[V * 12];
    size_t used = 0;
    const char *specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 0; i < V; i++) {
        if (i < 5) used += (size_t)snprintf(vocab + used, sizeof vocab - used, "%s\n", specials[i]);
        else used += (size_t)snprintf(vocab + used, sizeof vocab - used, "t%d\n", i);
    }
    bert_shape shape = {2, 64, 4, 128, T};
    const char *labels[] = {"a", "b", "c"};
    bert_model *m = NULL;
    char err[SM_ERR_MAX] = "";
    int rc = bert_model_create_scratch(&shape, vocab, used, 1, 3, labels, 7, &m, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    return m;
}

/* A batch of B rows, lengths 3..T (padding after), labels 0..2. */
static void make_batch(int B, int *ids, int *lengths, int *labels)
{
    for (int b = 0; b < B; b++) {
        lengths[b] = 3 + (b * 7) % (T - 2);
        labels[b] = b % 3;
        for (int t = 0; t < T; t++)
            ids[b * T + t] = t >= lengths[b] ? 0 : t == 0 ? 2 : 5 + (b * 31 + t * 17) % (V - 5);
    }
}

typedef struct step_out {
    double loss;
    float logits[B_MAX * 3];
    float *grads;
} step_out;

/* One forward and backward of a B-row batch with dropout on `threads`. */
static void one_step(bert_model *m, int threads, int B, step_out *o)
{
    char err[SM_ERR_MAX] = "";
    backend *be;
    bert_train_ws *ws;
    bert_params g;
    int ids[B_MAX * T], lengths[B_MAX], labels[B_MAX];
    make_batch(B, ids, lengths, labels);
    assert_int_equal(backend_cpu_create(threads, &be, err), SM_OK);
    assert_int_equal(bert_train_ws_create(be, &m->cfg, B_MAX, T, &ws, err), SM_OK);
    o->grads = calloc(m->n_floats, sizeof *o->grads);
    assert_non_null(o->grads);
    assert_int_equal(bert_params_bind(&m->cfg, 1, o->grads, &g, err), SM_OK);
    bert_dropout drop;
    bert_dropout_from_config(&m->cfg, 0.2f, 99, &drop);
    drop.step = 5;
    int rc = bert_train_forward(&m->cfg, &m->p, ws, ids, lengths, labels, B, T, &drop, &o->loss,
                                o->logits, err);
    if (!rc) rc = bert_train_backward(&m->cfg, &m->p, &g, ws, 1.0f / B, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    bert_params_release(&g);
    bert_train_ws_free(ws);
    be->destroy(be);
}

static double norm_of(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

/* ||a - b|| / max(||b||, floor): relative, except for tensors whose true
 * gradient is zero (the key bias: softmax ignores a constant per row),
 * which hold only rounding noise and are measured against floor. */
static double rel_diff_floor(const float *a, const float *b, size_t n, double floor)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    double s = norm_of(b, n);
    return sqrt(d) / (s > floor ? s : floor);
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    return rel_diff_floor(a, b, n, 1e-30);
}

static void lanes_match_one_thread(int threads, int B)
{
    bert_model *m = scratch_model();
    step_out one, many;
    one_step(m, 1, B, &one);
    one_step(m, threads, B, &many);
    assert_true(fabs(many.loss - one.loss) <= 1e-6 * fabs(one.loss));
    assert_true(rel_diff(many.logits, one.logits, (size_t)B * 3) <= 1e-6);
    bert_param_spec *specs;
    int n;
    size_t total;
    char err[SM_ERR_MAX] = "";
    assert_int_equal(bert_param_table(&m->cfg, 1, &specs, &n, &total, err), SM_OK);
    double worst = 0, floor = 1e-3 * norm_of(one.grads, total);
    for (int i = 0; i < n; i++) {
        double r = rel_diff_floor(many.grads + specs[i].offset, one.grads + specs[i].offset,
                                  specs[i].numel, floor);
        if (r > 1e-6) print_error("%s: relative difference %g\n", specs[i].name, r);
        worst = r > worst ? r : worst;
    }
    if (getenv("TRAIN_VERBOSE"))
        print_message("%d threads, batch %d: worst gradient difference %g\n", threads, B, worst);
    assert_true(worst <= 1e-6);
    free(specs);
    free(one.grads);
    free(many.grads);
    bert_model_free(m);
}

static void test_two_lanes_match(void **state)
{
    (void)state;
    lanes_match_one_thread(2, 6);
    lanes_match_one_thread(2, 7);
}

static void test_three_lanes_match(void **state)
{
    (void)state;
    lanes_match_one_thread(3, 7);
    lanes_match_one_thread(3, 2); /* fewer rows than lanes */
}

static void test_one_row(void **state)
{
    (void)state;
    lanes_match_one_thread(2, 1);
}

/* Three AdamW steps on two threads; losses[3] and the parameters out. */
static void three_steps(double *losses, float **params_out, size_t *n_out)
{
    bert_model *m = scratch_model();
    char err[SM_ERR_MAX] = "";
    backend *be;
    bert_train_ws *ws;
    adamw *opt;
    bert_params g;
    assert_int_equal(backend_cpu_create(2, &be, err), SM_OK);
    assert_int_equal(bert_train_ws_create(be, &m->cfg, B_MAX, T, &ws, err), SM_OK);
    assert_int_equal(adamw_create(be, &m->cfg, 1, &opt, err), SM_OK);
    float *grads = calloc(m->n_floats, sizeof *grads);
    assert_non_null(grads);
    assert_int_equal(bert_params_bind(&m->cfg, 1, grads, &g, err), SM_OK);
    int ids[B_MAX * T], lengths[B_MAX], labels[B_MAX];
    make_batch(B_MAX, ids, lengths, labels);
    bert_dropout drop;
    bert_dropout_from_config(&m->cfg, 0.1f, 3, &drop);
    adamw_hparams h;
    adamw_hparams_default(&h);
    for (int s = 0; s < 3; s++) {
        drop.step = (uint64_t)s;
        memset(grads, 0, m->n_floats * sizeof *grads);
        assert_int_equal(bert_train_forward(&m->cfg, &m->p, ws, ids, lengths, labels, B_MAX, T,
                                            &drop, &losses[s], NULL, err),
                         SM_OK);
        assert_int_equal(bert_train_backward(&m->cfg, &m->p, &g, ws, 1.0f / B_MAX, err), SM_OK);
        assert_int_equal(adamw_step(opt, m->arena, grads, &h, 1e-3f, NULL, err), SM_OK);
    }
    *n_out = m->n_floats;
    *params_out = malloc(m->n_floats * sizeof(float));
    assert_non_null(*params_out);
    memcpy(*params_out, m->arena, m->n_floats * sizeof(float));
    bert_params_release(&g);
    free(grads);
    adamw_free(opt);
    bert_train_ws_free(ws);
    be->destroy(be);
    bert_model_free(m);
}

static void test_repeatable_on_two_threads(void **state)
{
    (void)state;
    double l1[3], l2[3];
    float *p1, *p2;
    size_t n1, n2;
    three_steps(l1, &p1, &n1);
    three_steps(l2, &p2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(l1, l2, sizeof l1);
    assert_memory_equal(p1, p2, n1 * sizeof *p1);
    assert_true(l1[2] != l1[0]); /* the steps did train */
    free(p1);
    free(p2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_lanes_match),
        cmocka_unit_test(test_three_lanes_match),
        cmocka_unit_test(test_one_row),
        cmocka_unit_test(test_repeatable_on_two_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
