/* test_train_loop.c: model/train/train_loop.c driven as trainer_run and
 * pretrain_run drive it, call by call, with no model forward in between.
 *
 * Checked against what the loop promises, each property computed here from
 * the outputs: every epoch's steps hold each training row exactly once and
 * no held-out row; a step's micro-batches are its rows in order, cut at
 * ceil(batch_size / accumulation); dropout keys count the micro-batches;
 * the same seed repeats the orders and another seed changes them; max_steps
 * ends the run inside an epoch; a step with divisor 0 leaves the parameters
 * as they were (read back from the arena) and counts as skipped; each
 * report's lr is optimizer.c's lr_linear_schedule for that step, its loss
 * the step's sum over its divisor, the epoch's loss the epoch's sums; and
 * the interrupt, non-finite loss and stop messages name the epoch and step.
 *
 * Run from the repository root: ./build/tests/test_train_loop
 */
#include "cpu/backend_cpu.h"
#include "support/train_test_util.h"

#include "core/errors.h"
#include "encoder/bert.h"
#include "train/optimizer.h"
#include "train/token_dataset.h"
#include "train/train_loop.h"

#define MODEL "tests/fixtures/train/model"
#define ROWS 103

static bert_model *load_model(void)
{
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int rc = bert_model_load_dir(MODEL, &m, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    return m;
}

/* ROWS rows of 3..40 tokens, row i's length a function of i. */
static token_dataset *dataset(int vocab)
{
    char err[SM_ERR_MAX] = "";
    void *p;
    assert_int_equal(token_dataset_create(sizeof(token_dataset), vocab, 1, &p, err), SM_OK);
    token_dataset *ds = p;
    int ids[40];
    for (int r = 0; r < ROWS; r++) {
        int n = 3 + (r * 37) % 38;
        ids[0] = 2;
        for (int t = 1; t < n - 1; t++) ids[t] = 5 + (r + t) % (vocab - 5);
        ids[n - 1] = 3;
        assert_int_equal(token_dataset_add(ds, ids, n, r % 2, err), SM_OK);
    }
    return ds;
}

static void dataset_free(token_dataset *ds)
{
    token_dataset_release(ds);
    free(ds);
}

static loop_options options(void)
{
    loop_options o;
    loop_options_default(&o);
    o.epochs = 3;
    o.lr = 1e-3f;
    o.batch_size = 8;
    o.accumulation = 3;
    o.valid_fraction = 0.2f;
    return o;
}

/* Runs the epochs without forward passes and writes each micro-batch's
 * rows, in order, to order[] (returns their count); checks the coverage,
 * slicing and dropout-key properties on the way. */
static int walk(const token_dataset *ds, const bert_model *m, const loop_options *o, int *order)
{
    char err[SM_ERR_MAX] = "";
    train_loop L;
    loop_init(&L, "training", o, NULL, ds, m);
    assert_int_equal(loop_split(&L, err), SM_OK);
    assert_int_equal(L.micro, (o->batch_size + o->accumulation - 1) / o->accumulation);
    int n = 0, epochs = 0;
    uint64_t key = 0;
    for (int epoch = 1; loop_epoch_begin(&L, epoch); epoch++) {
        int seen[ROWS] = {0};
        long steps = 0;
        loop_step s;
        epochs++;
        while (loop_next_step(&L, &s)) {
            steps++;
            assert_int_equal(s.epoch, epoch);
            assert_true(s.count >= 1 && s.count <= o->batch_size);
            assert_int_equal(s.n_micro, (s.count + L.micro - 1) / L.micro);
            int at = 0;
            for (int k = 0; k < s.n_micro; k++) {
                loop_micro mb;
                const int *idx;
                int rows;
                loop_micro_rows(&L, &s, k, &idx, &rows);
                assert_int_equal(loop_micro_batch(&L, &s, k, &mb, err), SM_OK);
                assert_ptr_equal(mb.idx, idx);
                assert_int_equal(mb.rows, rows);
                assert_ptr_equal(mb.idx, s.idx + at); /* the step's rows, in order */
                assert_true(mb.rows >= 1 && mb.rows <= L.micro);
                assert_true(mb.drop->step == key++);  /* one key per micro-batch */
                for (int b = 0; b < mb.rows; b++) {
                    assert_true(mb.idx[b] >= 0 && mb.idx[b] < ROWS);
                    seen[mb.idx[b]]++;
                    order[n++] = mb.idx[b];
                }
                at += mb.rows;
            }
            assert_int_equal(at, s.count);
        }
        assert_int_equal(steps, L.steps_per_epoch);
        for (int v = 0; v < L.n_valid; v++) seen[L.valid_idx[v]] += 100;
        for (int r = 0; r < ROWS; r++)
            if (seen[r] != 1 && seen[r] != 100)
                fail_msg("epoch %d: row %d seen %d times (100: held out)", epoch, r, seen[r]);
    }
    assert_int_equal(epochs, o->epochs);
    assert_int_equal(L.n_train + L.n_valid, ROWS);
    loop_free(&L);
    return n;
}

static void test_orders(void **state)
{
    (void)state;
    bert_model *m = load_model();
    token_dataset *ds = dataset(m->cfg.vocab_size);
    static int a[3 * ROWS], b[3 * ROWS], c[3 * ROWS], d[3 * ROWS];
    loop_options o = options();
    int n = walk(ds, m, &o, a);
    assert_int_equal(n, 3 * (ROWS - 21)); /* 21 of 103 held out */
    assert_int_equal(walk(ds, m, &o, b), n);
    assert_memory_equal(a, b, (size_t)n * sizeof *a); /* the same seed, the same orders */
    assert_memory_not_equal(a, a + n / 3, (size_t)(n / 3) * sizeof *a); /* epochs differ */
    o.seed = 43;
    assert_int_equal(walk(ds, m, &o, c), n);
    assert_memory_not_equal(a, c, (size_t)n * sizeof *a);
    o.seed = 42;
    o.group_by_length = 0;
    o.accumulation = 1;
    assert_int_equal(walk(ds, m, &o, d), n);
    dataset_free(ds);
    bert_model_free(m);
}

/* Steps taken with real arenas and AdamW: max_steps, the skipped step, the
 * reports. */
static void test_steps(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = cpu_backend(1);
    bert_model *m = load_model();
    token_dataset *ds = dataset(m->cfg.vocab_size);
    loop_options o = options();
    o.max_steps = 13; /* 82 training rows: 11 steps an epoch */
    train_loop L;
    loop_init(&L, "training", &o, be, ds, m);
    assert_int_equal(L.steps_per_epoch, 11);
    assert_int_equal(L.total_steps, 13);
    assert_int_equal(loop_split(&L, err), SM_OK);
    assert_int_equal(loop_arenas(&L, m->n_floats, err), SM_OK);
    assert_int_equal(loop_upload(&L, 0, m->arena, m->n_floats, err), SM_OK);
    assert_int_equal(adamw_create(be, &m->cfg, 1, &L.opt, err), SM_OK);
    float *before = malloc(m->n_floats * sizeof *before), *after = malloc(m->n_floats * sizeof *after);
    assert_non_null(before);
    assert_non_null(after);

    int epochs = 0;
    long steps = 0;
    for (int epoch = 1; loop_epoch_begin(&L, epoch); epoch++) {
        loop_step s;
        loop_report r;
        double sum = 0;
        long denom = 0;
        epochs++;
        while (loop_next_step(&L, &s)) {
            long divisor = steps == 2 ? 0 : s.count; /* step 3 predicts nothing */
            assert_int_equal(loop_download(&L, before, err), SM_OK);
            assert_int_equal(loop_step_begin(&L, &s, divisor, err), SM_OK);
            assert_true(s.scale == (divisor ? 1.0f / (float)divisor : 0.0f));
            for (int k = 0; k < s.n_micro; k++) {
                loop_micro mb;
                assert_int_equal(loop_micro_batch(&L, &s, k, &mb, err), SM_OK);
                assert_int_equal(loop_add_loss(&L, &s, 0.5 * mb.rows, err), SM_OK);
            }
            assert_int_equal(loop_step_end(&L, &s, &r, err), SM_OK);
            assert_int_equal(loop_download(&L, after, err), SM_OK);
            steps++;
            assert_int_equal(r.step, steps);
            assert_int_equal(r.total_steps, 13);
            assert_int_equal(r.epoch, epoch);
            assert_int_equal(r.epoch_done, 0);
            assert_int_equal(r.denom, divisor);
            assert_true(r.lr == lr_linear_schedule(o.lr, steps - 1, L.warmup, 13));
            if (divisor) {
                assert_true(r.loss == 0.5 * s.count / (double)divisor);
                /* weight decay moves the weights even with zero gradients,
                 * once the warm-up gives a rate */
                if (r.lr > 0) assert_memory_not_equal(before, after, m->n_floats * sizeof *after);
            } else {
                assert_true(isnan(r.loss));
                assert_memory_equal(before, after, m->n_floats * sizeof *after);
            }
            sum += s.loss_sum;
            denom += divisor;
        }
        assert_true(loop_epoch_loss(&L) == sum / (double)denom);
        loop_epoch_report(&L, &r);
        assert_int_equal(r.epoch_done, 1);
        assert_int_equal(r.epoch, epoch);
        assert_int_equal(r.denom, denom);
        assert_true(r.epoch_loss == sum / (double)denom);
    }
    assert_int_equal(epochs, 2); /* max_steps ends the run two steps into epoch 2 */
    assert_int_equal(steps, 13);
    assert_int_equal(L.step, 13);
    assert_int_equal(L.skipped_steps, 1);
    assert_true(loop_examples_per_sec(&L) > 0);
    free(before);
    free(after);
    loop_free(&L);
    dataset_free(ds);
    bert_model_free(m);
    be->destroy(be);
}

static int stop_on_second_poll(void *user)
{
    int *polls = user;
    return ++*polls == 2;
}

static void test_stops(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m = load_model();
    token_dataset *ds = dataset(m->cfg.vocab_size);
    loop_options o = options();
    int polls = 0;
    o.interrupt = stop_on_second_poll;
    o.user = &polls;
    train_loop L;
    loop_init(&L, "pretraining", &o, NULL, ds, m);
    assert_int_equal(loop_split(&L, err), SM_OK);
    assert_true(loop_epoch_begin(&L, 1));
    loop_step s;
    loop_micro mb;
    assert_true(loop_next_step(&L, &s));
    assert_int_equal(loop_micro_batch(&L, &s, 0, &mb, err), SM_OK);
    assert_int_equal(loop_micro_batch(&L, &s, 1, &mb, err), SM_ERR_INTERRUPTED);
    assert_string_equal(err, "pretraining interrupted at epoch 1, step 1");
    assert_int_equal(polls, 2);

    assert_int_equal(loop_add_loss(&L, &s, 1.5, err), SM_OK);
    assert_int_equal(loop_add_loss(&L, &s, NAN, err), SM_ERR_INVALID);
    assert_string_equal(err, "pretraining diverged: the loss is NaN at epoch 1, step 1; "
                             "try a lower lr");
    assert_int_equal(loop_add_loss(&L, &s, -INFINITY, err), SM_ERR_INVALID);
    assert_string_equal(err, "pretraining diverged: the loss is infinite at epoch 1, step 1; "
                             "try a lower lr");
    assert_true(s.loss_sum == 1.5); /* the refused losses are not added */

    loop_report r = {.epoch = 2, .step = 17};
    assert_int_equal(loop_stopped(&L, &r, err), SM_ERR_INTERRUPTED);
    assert_string_equal(err, "pretraining stopped at epoch 2, step 17");
    r.epoch_done = 1;
    assert_int_equal(loop_stopped(&L, &r, err), SM_ERR_INTERRUPTED);
    assert_string_equal(err, "pretraining stopped after epoch 2");
    loop_free(&L);
    dataset_free(ds);
    bert_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
