/* test_ext_device.c: the extension's GPU paths on the test backend
 * (tests/support/fake_gpu.h), loaded as the CUDA plugin through
 * $SENTIMENT_CUDA_PLUGIN: results equal to the CPU's, the weights uploaded
 * once per device, batches sized by free memory, and the errors of a device
 * that is full, refuses an allocation or fails an op.
 */
#include "support/ext_test_util.h"

#include <dlfcn.h>

#include "support/fake_gpu.h"

static fake_gpu_set_fn g_set;
static fake_gpu_get_fn g_get;

static const fake_gpu_settings k_roomy = {2, (size_t)8 << 30, (size_t)8 << 30, 0, -1};

static fake_gpu_counts counts(void)
{
    fake_gpu_counts c;
    g_get(&c);
    return c;
}

/* Rows of t where the current device's label or score differs from the
 * CPU's, kept in cpu(id, label, score) by save_cpu(). */
static void save_cpu(sqlite3 *db)
{
    exec_ok(db, "SELECT sentiment_config('device', 'cpu')");
    exec_ok(db, "DROP TABLE IF EXISTS cpu");
    exec_ok(db, "CREATE TABLE cpu AS SELECT id, sentiment(body, 'tiny') AS label, "
                "sentiment_score(body, 'tiny') AS score FROM t");
}

static int64_t differences(sqlite3 *db, const char *rows)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT count(*) FROM cpu) - (SELECT count(*) FROM %s) + "
             "(SELECT count(*) FROM cpu JOIN %s AS g ON g.id = cpu.id "
             " WHERE g.label IS NOT cpu.label OR (g.score IS NULL) <> (cpu.score IS NULL) "
             "    OR abs(g.score - cpu.score) > 1e-4)",
             rows, rows);
    return q_int(db, sql);
}

static const char k_scalar_rows[] =
    "(SELECT id, sentiment(body, 'tiny') AS label, sentiment_score(body, 'tiny') AS score FROM t)";

static void test_results_equal_cpu(void **state)
{
    (void)state;
    g_set(&k_roomy);
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    save_cpu(db);
    expect_text(db, "SELECT sentiment_config('device', 'cuda:0')", "cuda:0");
    expect_text(db, "SELECT sentiment_device()", "cuda:0 test backend, bf16");
    assert_int_equal(differences(db, k_scalar_rows), 0);
    assert_int_equal(differences(db, "classify('t', 'body', 'tiny', 7)"), 0);
    /* precision is the backend's: set, shown, and int8 refused on a GPU */
    expect_text(db, "SELECT sentiment_config('precision', 'fp32')", "fp32");
    expect_text(db, "SELECT sentiment_device()", "cuda:0 test backend, fp32");
    expect_error(db, "SELECT sentiment_config('precision', 'int8')", "runs on the CPU only");
    expect_error(db, "SELECT sentiment_config('device', 'cuda:2')",
                 "device 'cuda:2' does not exist; this machine has 2 GPUs");
    sqlite3_close(db);
}

/* The first query on a device uploads the weights; later connections on it
 * reuse them; another device gets its own copy. */
static void test_weights_once_per_device(void **state)
{
    (void)state;
    g_set(&k_roomy);
    sqlite3 *a = open_db(), *b = open_db();
    load_tiny(a);
    load_tiny(b);
    exec_ok(a, "SELECT sentiment_config('device', 'cuda:0')");
    exec_ok(b, "SELECT sentiment_config('device', 'cuda:0')");
    fake_gpu_counts c0 = counts();
    expect_text(a, "SELECT sentiment('房间很干净', 'tiny') IS NOT NULL", "1");
    fake_gpu_counts c1 = counts();
    expect_text(b, "SELECT sentiment('房间很干净', 'tiny') IS NOT NULL", "1");
    fake_gpu_counts c2 = counts();
    size_t first = c1.uploaded[0] - c0.uploaded[0], second = c2.uploaded[0] - c1.uploaded[0];
    /* the tiny model's float32 weights: about 1 MB (the safetensors file) */
    assert_true(first > 900000);
    assert_true(second < 4096); /* one row's token ids and length */
    assert_int_equal(c2.uploaded[1], c0.uploaded[1]);
    exec_ok(b, "SELECT sentiment_config('device', 'cuda:1')");
    expect_text(b, "SELECT sentiment('房间很干净', 'tiny') IS NOT NULL", "1");
    fake_gpu_counts c3 = counts();
    assert_true(c3.uploaded[1] - c2.uploaded[1] > 900000);
    assert_true(c3.created[1] >= 1);
    sqlite3_close(a);
    sqlite3_close(b);
}

/* Free memory decides the batch: not even one row is an error that says
 * how much is needed; a little more than one row gives smaller workspaces
 * than a roomy device, and the same results. */
static void test_batches_fit_free_memory(void **state)
{
    (void)state;
    fake_gpu_settings s = k_roomy;
    s.free_bytes = (size_t)16 << 20;
    g_set(&s);
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    save_cpu(db);
    exec_ok(db, "SELECT sentiment_config('device', 'cuda:0')");
    char *err = NULL;
    assert_int_not_equal(sqlite3_exec(db, "SELECT sentiment('很好', 'tiny')", NULL, NULL, &err),
                         SQLITE_OK);
    assert_non_null(err);
    assert_non_null(strstr(err, "not enough GPU memory on cuda:0"));
    const char *need = strstr(err, "needs about ");
    assert_non_null(need);
    double row_mib = atof(need + strlen("needs about "));
    sqlite3_free(err);
    assert_true(row_mib > 1.0);

    g_set(&k_roomy);
    assert_int_equal(differences(db, "classify('t', 'body', 'tiny', 64)"), 0);
    size_t roomy = counts().largest_alloc;
    sqlite3_close(db);

    /* room for a few rows: 0.8 of free is used (the engine's share) */
    s.free_bytes = (size_t)(row_mib * 1.02 / 0.8 * 1048576.0);
    g_set(&s);
    db = open_db();
    load_tiny(db);
    make_reviews(db);
    save_cpu(db);
    exec_ok(db, "SELECT sentiment_config('device', 'cuda:0')");
    assert_int_equal(differences(db, "classify('t', 'body', 'tiny', 64)"), 0);
    size_t tight = counts().largest_alloc;
    print_message("one row needs %.1f MiB; largest workspace %zu bytes roomy, %zu tight\n", row_mib,
                  roomy, tight);
    assert_true(tight < roomy);
    sqlite3_close(db);
}

/* A device that fails: the message says which op and why, the connection
 * survives, and the next query after the fault runs. */
static void test_device_faults(void **state)
{
    (void)state;
    g_set(&k_roomy);
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    exec_ok(db, "SELECT sentiment_config('device', 'cuda:0')");
    char *want = q_text(db, "SELECT sentiment('外卖送得太慢了', 'tiny')");
    fake_gpu_settings s = k_roomy;
    s.fail_after = counts().ops; /* the next op fails */
    g_set(&s);
    expect_error(db, "SELECT sentiment('外卖送得太慢了', 'tiny')",
                 "an injected fault of the test backend");
    expect_error(db, "SELECT count(*) FROM classify('t', 'body', 'tiny')",
                 "an injected fault of the test backend");
    g_set(&k_roomy);
    expect_text(db, "SELECT sentiment('外卖送得太慢了', 'tiny')", want);
    free(want);

    /* a model not on the device yet whose weights cannot be allocated: the
     * error names both, and once memory is there the upload is retried */
    exec_ok(db, "SELECT sentiment_load('ernie', '" ERNIE_MODEL "')");
    exec_ok(db, "SELECT sentiment_config('device', 'cpu')");
    want = q_text(db, "SELECT sentiment_score('很好', 'ernie')");
    exec_ok(db, "SELECT sentiment_config('device', 'cuda:0')");
    s = k_roomy;
    s.max_alloc = 4096;
    g_set(&s);
    expect_error(db, "SELECT sentiment('很好', 'ernie')", "the model's parameters need");
    expect_error(db, "SELECT sentiment('很好', 'ernie')", "the test backend's limit");
    g_set(&k_roomy);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT abs(sentiment_score('很好', 'ernie') - %s) < 1e-4", want);
    expect_text(db, sql, "1");
    free(want);
    sqlite3_close(db);
}

/* sentiment_explain on the device: the training passes on the test backend
 * (device memory, uploads) give the CPU's attributions. */
static void test_explain_equals_cpu(void **state)
{
    (void)state;
    g_set(&k_roomy);
    sqlite3 *cpu = open_db(), *gpu = open_db();
    load_tiny(cpu);
    load_tiny(gpu);
    exec_ok(gpu, "SELECT sentiment_config('device', 'cuda:0')");
    static const char *const sql[] = {
        "SELECT sentiment_explain('这家酒店很干净，服务也很周到。', 'tiny', '{\"steps\":8}')",
        "SELECT sentiment_explain('太差了，非常失望', 'tiny', '{\"method\":\"gradient_x_input\"}')",
    };
    for (size_t i = 0; i < sizeof sql / sizeof *sql; i++) {
        char *a = q_text(cpu, sql[i]), *b = q_text(gpu, sql[i]);
        if (strcmp(a, b)) fail_msg("cpu %s\ngpu %s", a, b);
        free(a);
        free(b);
    }
    expect_text(gpu, "SELECT sentiment_device()", "cuda:0 test backend, bf16");
    sqlite3_close(cpu);
    sqlite3_close(gpu);
}

int main(void)
{
    /* before the extension looks for the plugin (once per process) */
    const char *build = getenv("BUILD");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fake_gpu.so", build && *build ? build : "build");
    setenv("SENTIMENT_CUDA_PLUGIN", path, 1);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "test_ext_device: cannot load %s: %s\n", path, dlerror());
        return 1;
    }
    *(void **)&g_set = dlsym(h, "fake_gpu_set");
    *(void **)&g_get = dlsym(h, "fake_gpu_get");
    if (!g_set || !g_get) {
        fprintf(stderr, "test_ext_device: %s lacks fake_gpu_set/fake_gpu_get\n", path);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_once_per_device), /* first: nothing uploaded yet */
        cmocka_unit_test(test_results_equal_cpu),
        cmocka_unit_test(test_batches_fit_free_memory),
        cmocka_unit_test(test_device_faults),
        cmocka_unit_test(test_explain_equals_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
