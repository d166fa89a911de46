/* test_explain.c: token attributions (model/train/explain.h) against
 * PyTorch's autograd (tests/fixtures/explain/, written by
 * tests/fixtures/gen_explain_golden.py in float64), completeness of
 * integrated gradients, and the argument checks.
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
#include "train/explain.h"

#define MAXT 64

typedef struct golden_case {
    int ids[MAXT], T;
    int ig, steps;
    int target;
    double logit, baseline;
    double attr[MAXT];
} golden_case;

/* Reads the next block of the golden file; 0 at the end. */
static int next_case(FILE *f, golden_case *g)
{
    char line[8192];
    int have = 0;
    memset(g, 0, sizeof *g);
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        *tab++ = 0;
        if (!strcmp(line, "ids")) {
            for (char *t = strtok(tab, "\t\n"); t; t = strtok(NULL, "\t\n")) g->ids[g->T++] = atoi(t);
        } else if (!strcmp(line, "method")) {
            char m[8];
            assert_int_equal(sscanf(tab, "%7s %d", m, &g->steps), 2);
            g->ig = !strcmp(m, "ig");
        } else if (!strcmp(line, "target")) {
            assert_int_equal(sscanf(tab, "%d %lf %lf", &g->target, &g->logit, &g->baseline), 3);
        } else if (!strcmp(line, "attr")) {
            int n = 0;
            for (char *t = strtok(tab, "\t\n"); t; t = strtok(NULL, "\t\n")) g->attr[n++] = atof(t);
            assert_int_equal(n, g->T);
            have = 1;
            break;
        }
    }
    return have;
}

static void golden_model(const char *name, int threads)
{
    char path[256], err[SM_ERR_MAX];
    bert_model *m = NULL;
    backend *be = NULL;
    bert_explainer *x = NULL;
    snprintf(path, sizeof path, "tests/fixtures/models/%s", name);
    if (bert_model_load_dir(path, &m, err)) fail_msg("%s: %s", path, err);
    assert_int_equal(backend_cpu_create(threads, &be, err), SM_OK);
    /* max_batch 5 < 16 steps: the steps run in several passes */
    if (bert_explainer_create(be, m, 5, MAXT, &x, err)) fail_msg("%s", err);
    snprintf(path, sizeof path, "tests/fixtures/explain/%s.txt", name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    golden_case g;
    int cases = 0;
    while (next_case(f, &g)) {
        bert_explanation e;
        int rc = bert_explain(x, g.ids, g.T, -1,
                              g.ig ? EXPLAIN_INTEGRATED_GRADIENTS : EXPLAIN_GRADIENT_X_INPUT,
                              g.steps, NULL, NULL, &e, err);
        if (rc) fail_msg("%s: %s", name, err);
        assert_int_equal(e.target, g.target);
        if (fabs(e.logit - g.logit) > 1e-5 || fabs(e.baseline_logit - g.baseline) > 1e-5)
            fail_msg("%s: logits %.7g %.7g, want %.7g %.7g", name, e.logit, e.baseline_logit,
                     g.logit, g.baseline);
        double scale = 0;
        for (int t = 0; t < g.T; t++) scale = fmax(scale, fabs(g.attr[t]));
        for (int t = 0; t < g.T; t++)
            if (fabs(e.attr[t] - g.attr[t]) > 1e-4 * scale + 1e-7)
                fail_msg("%s %s token %d: %.7g, PyTorch %.7g (largest %.3g)", name,
                         g.ig ? "ig" : "gxi", t, e.attr[t], g.attr[t], scale);
        /* [CLS] and [SEP] are the same in the baseline */
        assert_true(e.attr[0] == 0.0f && e.attr[g.T - 1] == 0.0f);
        cases++;
    }
    fclose(f);
    assert_int_equal(cases, 8);
    bert_explainer_free(x);
    be->destroy(be);
    bert_model_free(m);
}

static void test_golden_bert(void **state)
{
    (void)state;
    golden_model("bert_tiny", 1);
    golden_model("bert_tiny", 2);
}

static void test_golden_ernie(void **state)
{
    (void)state;
    golden_model("ernie_tiny", 2);
}

static void test_golden_xlmr(void **state)
{
    (void)state;
    golden_model("xlmr_tiny", 2);
}

/* Σ_t a_t = z(x) - z(b) up to the midpoint rule's O(1/m²): the gap shrinks
 * about 4x per doubling of the steps, and is small at 256. */
static void test_completeness(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    bert_model *m = NULL;
    backend *be = NULL;
    bert_explainer *x = NULL;
    assert_int_equal(bert_model_load_dir("tests/fixtures/models/bert_tiny", &m, err), SM_OK);
    assert_int_equal(backend_cpu_create(2, &be, err), SM_OK);
    assert_int_equal(bert_explainer_create(be, m, 64, MAXT, &x, err), SM_OK);
    static const int ids[] = {2, 523, 566, 542, 536, 522, 846, 1064, 444, 3};
    int T = (int)(sizeof ids / sizeof ids[0]);
    double gap[4];
    static const int steps[4] = {4, 16, 64, 256};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 4; i++) {
            bert_explanation e;
            if (bert_explain(x, ids, T, k, EXPLAIN_INTEGRATED_GRADIENTS, steps[i], NULL, NULL, &e,
                             err))
                fail_msg("%s", err);
            assert_int_equal(e.target, k);
            gap[i] = fabs(e.attr_sum - ((double)e.logit - e.baseline_logit));
            double diff = fabs((double)e.logit - e.baseline_logit);
            if (i == 3 && gap[i] > 1e-3 * diff + 1e-6)
                fail_msg("label %d, 256 steps: sum %.9g vs z(x) - z(b) %.9g", k, e.attr_sum,
                         (double)e.logit - e.baseline_logit);
        }
        /* more steps, a smaller gap (allowing float32 noise at the end) */
        assert_true(gap[1] < gap[0] || gap[1] < 1e-6);
        assert_true(gap[2] < gap[1] || gap[2] < 1e-6);
    }
    bert_explainer_free(x);
    be->destroy(be);
    bert_model_free(m);
}

static int stop_now(void *user)
{
    (void)user;
    return 1;
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    bert_model *m = NULL;
    backend *be = NULL;
    bert_explainer *x = NULL;
    bert_explanation e;
    assert_int_equal(bert_model_load_dir("tests/fixtures/models/bert_tiny", &m, err), SM_OK);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_explainer_create(be, m, 4, 16, &x, err), SM_OK);
    static const int ids[] = {2, 523, 566, 3};
    assert_int_equal(bert_explain(x, ids, 1, -1, EXPLAIN_GRADIENT_X_INPUT, 1, NULL, NULL, &e, err),
                     SM_ERR_INVALID);
    assert_int_equal(bert_explain(x, ids, 17, -1, EXPLAIN_GRADIENT_X_INPUT, 1, NULL, NULL, &e, err),
                     SM_ERR_INVALID);
    assert_int_equal(bert_explain(x, ids, 4, 2, EXPLAIN_GRADIENT_X_INPUT, 1, NULL, NULL, &e, err),
                     SM_ERR_INVALID);
    assert_non_null(strstr(err, "label 2"));
    assert_int_equal(bert_explain(x, ids, 4, 0, EXPLAIN_INTEGRATED_GRADIENTS, 0, NULL, NULL, &e, err),
                     SM_ERR_INVALID);
    assert_int_equal(bert_explain(x, ids, 4, 0, EXPLAIN_INTEGRATED_GRADIENTS, 2000, NULL, NULL, &e,
                                  err),
                     SM_ERR_INVALID);
    static const int bad[] = {2, 999999, 566, 3};
    assert_int_equal(bert_explain(x, bad, 4, 0, EXPLAIN_INTEGRATED_GRADIENTS, 4, NULL, NULL, &e, err),
                     SM_ERR_INVALID);
    assert_int_equal(bert_explain(x, ids, 4, 0, EXPLAIN_INTEGRATED_GRADIENTS, 8, stop_now, NULL, &e,
                                  err),
                     SM_ERR_INTERRUPTED);
    /* still usable */
    assert_int_equal(bert_explain(x, ids, 4, -1, EXPLAIN_INTEGRATED_GRADIENTS, 8, NULL, NULL, &e,
                                  err),
                     SM_OK);
    bert_explainer_free(x);
    be->destroy(be);
    bert_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_bert),
        cmocka_unit_test(test_golden_ernie),
        cmocka_unit_test(test_golden_xlmr),
        cmocka_unit_test(test_completeness),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
