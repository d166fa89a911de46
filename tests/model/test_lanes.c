/* test_lanes.c: lane sets and the two ways to run on them (model/encoder/lanes.h):
 * every piece and item runs exactly once, on its own lane; the error that
 * comes back is the lowest failing lane's (lanes_run) or a failing item's
 * (lanes_for_each), with its own message; a backend without lanes has none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/lanes.h"

/* Workers only count; the test asserts on the main thread. */
typedef struct run_ctx {
    atomic_int calls[16];
    atomic_int bad;
    int fail_from; /* lanes >= this fail (16: none) */
} run_ctx;

static int piece(void *ctx, int lane, int n, char *err)
{
    run_ctx *c = ctx;
    if (lane < 0 || lane >= n || lane >= 16) {
        atomic_fetch_add(&c->bad, 1);
        return SM_ERR_INVALID;
    }
    atomic_fetch_add(&c->calls[lane], 1);
    if (lane >= c->fail_from) return sm_error(err, SM_ERR_DEVICE, "lane %d of %d failed", lane, n);
    return SM_OK;
}

static void test_run_every_lane_once(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    for (int n = 1; n <= 8; n++) {
        run_ctx c = {.fail_from = 16};
        assert_int_equal(lanes_run(n, piece, &c, err), SM_OK);
        assert_int_equal(atomic_load(&c.bad), 0);
        for (int i = 0; i < 16; i++) assert_int_equal(atomic_load(&c.calls[i]), i < n ? 1 : 0);
    }
    /* lanes 2.. fail: lane 2's message, whatever the threads' timing */
    for (int rep = 0; rep < 20; rep++) {
        run_ctx c = {.fail_from = 2};
        assert_int_equal(lanes_run(6, piece, &c, err), SM_ERR_DEVICE);
        assert_string_equal(err, "lane 2 of 6 failed");
        for (int i = 0; i < 6; i++) assert_int_equal(atomic_load(&c.calls[i]), 1);
    }
    assert_int_equal(lanes_run(0, piece, NULL, err), SM_OK);
}

typedef struct each_ctx {
    atomic_int seen[200];
    atomic_int busy[4]; /* items running on each lane now */
    atomic_int bad;     /* a lane out of range, or two items on one lane at once */
    int fail_item;      /* -1: none */
} each_ctx;

static int item(void *ctx, int it, int lane, char *err)
{
    each_ctx *c = ctx;
    if (lane < 0 || lane >= 4 || it < 0 || it >= 200) {
        atomic_fetch_add(&c->bad, 1);
        return SM_ERR_INVALID;
    }
    if (atomic_fetch_add(&c->busy[lane], 1) != 0) atomic_fetch_add(&c->bad, 1);
    atomic_fetch_add(&c->seen[it], 1);
    atomic_fetch_sub(&c->busy[lane], 1);
    if (it == c->fail_item) return sm_error(err, SM_ERR_NOMEM, "item %d failed", it);
    return SM_OK;
}

static void test_for_each_item_once(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    each_ctx c = {.fail_item = -1};
    assert_int_equal(lanes_for_each(4, 200, item, &c, err), SM_OK);
    assert_int_equal(atomic_load(&c.bad), 0);
    for (int i = 0; i < 200; i++) assert_int_equal(atomic_load(&c.seen[i]), 1);

    /* a failing item: its code and message; no item runs twice */
    each_ctx f = {.fail_item = 37};
    assert_int_equal(lanes_for_each(4, 200, item, &f, err), SM_ERR_NOMEM);
    assert_string_equal(err, "item 37 failed");
    assert_int_equal(atomic_load(&f.bad), 0);
    assert_int_equal(atomic_load(&f.seen[37]), 1);
    for (int i = 0; i < 200; i++) assert_true(atomic_load(&f.seen[i]) <= 1);
}

static void test_lane_set(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    backend *be = NULL, *one = NULL;
    assert_int_equal(backend_cpu_create(3, &be, err), SM_OK);
    lane_set s = {0};
    assert_int_equal(lane_set_grow(&s, be, 2, err), SM_OK);
    assert_int_equal(s.n, 2);
    backend *first = s.be[0];
    assert_int_equal(lane_set_grow(&s, be, 1, err), SM_OK); /* never shrinks */
    assert_int_equal(lane_set_grow(&s, be, 3, err), SM_OK);
    assert_int_equal(s.n, 3);
    assert_ptr_equal(s.be[0], first); /* kept */
    for (int i = 0; i < s.n; i++) assert_int_equal(s.be[i]->lanes(s.be[i]), 1);
    lane_set_free(&s);
    assert_int_equal(s.n, 0);
    assert_null(s.be);

    /* a single-lane backend has no lanes to make */
    assert_int_equal(backend_cpu_create(1, &one, err), SM_OK);
    assert_int_equal(lane_set_grow(&s, one, 2, err), SM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "has none"));
    assert_int_equal(s.n, 0);
    lane_set_free(&s);
    one->destroy(one);
    be->destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_every_lane_once),
        cmocka_unit_test(test_for_each_item_once),
        cmocka_unit_test(test_lane_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
