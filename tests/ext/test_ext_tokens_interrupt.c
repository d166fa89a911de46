/* test_ext_tokens_interrupt.c: sentiment_tokens() on a huge text stops
 * when asked.
 *
 * A 48 MB text (built here) takes seconds to tokenize and turn into JSON
 * (1.6 s with the built-in model, 8 s with xlmr_tiny's tokenizer.json, on
 * the machine this was written on). A progress handler that says stop
 * once 100 ms have passed, or sqlite3_interrupt() from another thread
 * after 100 ms, must end the call with an error that says "interrupted",
 * soon: the hang check fails only past 1 s, 10 times the expected time.
 * Both for the built-in model (vocab.txt) and a tokenizer.json one. A
 * stored model whose tokenizer.json has a 60,000-byte piece is refused
 * with an error naming the piece.
 *
 * Run from the repository root: ./build/tests/test_ext_tokens_interrupt
 */
#include "support/ext_test_util.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define XLMR_MODEL "tests/fixtures/models/xlmr_tiny"
#define TEXT_BYTES (48u << 20)
#define HANG_S 1.0

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *huge_text(size_t *len)
{
    static const char unit[] = "这家酒店很干净，服务也很周到，下次还来。";
    size_t ul = sizeof unit - 1, n = TEXT_BYTES / ul * ul;
    char *t = malloc(n + 1);
    assert_non_null(t);
    for (size_t i = 0; i < n; i += ul)
        memcpy(t + i, unit, ul);
    t[n] = '\0';
    *len = n;
    return t;
}

/* Runs sentiment_tokens(?1, model) on text; returns the step's code and
 * the seconds it took; *msg gets the error message (static). */
static int sql_call(sqlite3 *db, const char *sql, const char *model, const char *text,
                    size_t len, double *secs, const char **msg)
{
    sqlite3_stmt *st = prepare(db, sql);
    assert_int_equal(sqlite3_bind_text64(st, 1, text, len, SQLITE_STATIC, SQLITE_UTF8),
                     SQLITE_OK);
    assert_int_equal(sqlite3_bind_text(st, 2, model, -1, SQLITE_STATIC), SQLITE_OK);
    double t0 = now();
    int rc = sqlite3_step(st);
    *secs = now() - t0;
    static char buf[512];
    snprintf(buf, sizeof buf, "%s", sqlite3_errmsg(db));
    *msg = buf;
    sqlite3_finalize(st);
    return rc;
}

static int tokens_call(sqlite3 *db, const char *model, const char *text, size_t len,
                       double *secs, const char **msg)
{
    return sql_call(db, "SELECT length(sentiment_tokens(?1, ?2))", model, text, len, secs, msg);
}

typedef struct {
    double deadline;
    long calls;
} progress;

static int stop_after_deadline(void *user)
{
    progress *p = user;
    p->calls++;
    return now() > p->deadline;
}

static sqlite3 *open_with_models(void)
{
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_load('xlmr', '" XLMR_MODEL "')");
    return db;
}

static void check_progress(sqlite3 *db, const char *model, const char *text, size_t len)
{
    progress p = {now() + 0.1, 0};
    const char *msg;
    double secs;
    sqlite3_progress_handler(db, 4, stop_after_deadline, &p);
    int rc = tokens_call(db, model, text, len, &secs, &msg);
    sqlite3_progress_handler(db, 0, NULL, NULL);
    printf("%s: progress handler: rc %d '%s' after %.3f s (%ld calls)\n", model, rc, msg,
           secs, p.calls);
    if (rc == SQLITE_ROW)
        fail_msg("%s: sentiment_tokens of %zu bytes ignored the progress handler", model, len);
    if (!strstr(msg, "interrupted"))
        fail_msg("%s: error '%s' does not say interrupted", model, msg);
    if (secs > HANG_S)
        fail_msg("%s: stopped only after %.1f s", model, secs);
}

static void test_progress_handler_builtin(void **state)
{
    (void)state;
    sqlite3 *db = open_with_models();
    size_t len;
    char *text = huge_text(&len);
    check_progress(db, "default", text, len);
    /* the connection works on */
    expect_text(db, "SELECT sentiment_tokens('很好')", "[\"很\",\"好\"]");
    free(text);
    sqlite3_close(db);
}

static void test_progress_handler_tokenizer_json(void **state)
{
    (void)state;
    sqlite3 *db = open_with_models();
    size_t len;
    char *text = huge_text(&len);
    check_progress(db, "xlmr", text, len);
    free(text);
    sqlite3_close(db);
}

typedef struct {
    sqlite3 *db;
    unsigned delay_us;
} interrupter;

static void *interrupt_later(void *arg)
{
    interrupter *it = arg;
    usleep(it->delay_us);
    sqlite3_interrupt(it->db);
    return NULL;
}

static void check_interrupt(sqlite3 *db, const char *model, const char *text, size_t len)
{
    interrupter it = {db, 100000};
    pthread_t th;
    const char *msg;
    double secs;
    assert_int_equal(pthread_create(&th, NULL, interrupt_later, &it), 0);
    int rc = tokens_call(db, model, text, len, &secs, &msg);
    pthread_join(th, NULL);
    printf("%s: sqlite3_interrupt: rc %d '%s' after %.3f s\n", model, rc, msg, secs);
    if (rc == SQLITE_ROW)
        fail_msg("%s: sentiment_tokens finished despite sqlite3_interrupt", model);
    if (!strstr(msg, "interrupted"))
        fail_msg("%s: error '%s' does not say interrupted", model, msg);
    if (secs > HANG_S)
        fail_msg("%s: stopped only after %.1f s", model, secs);
}

static void test_interrupt_builtin(void **state)
{
    (void)state;
    sqlite3 *db = open_with_models();
    size_t len;
    char *text = huge_text(&len);
    check_interrupt(db, "default", text, len);
    expect_text(db, "SELECT sentiment_tokens('很好')", "[\"很\",\"好\"]");
    free(text);
    sqlite3_close(db);
}

static void test_interrupt_tokenizer_json(void **state)
{
    (void)state;
    sqlite3 *db = open_with_models();
    size_t len;
    char *text = huge_text(&len);
    check_interrupt(db, "xlmr", text, len);
    free(text);
    sqlite3_close(db);
}

/* sentiment() of the huge text with a Unigram model reads all of it
 * (Viterbi over text without spaces has no early stop): the engine polls
 * inside the tokenizer too, so the progress handler ends it. */
static void test_progress_handler_classify(void **state)
{
    (void)state;
    sqlite3 *db = open_with_models();
    size_t len;
    char *text = huge_text(&len);
    progress p = {now() + 0.1, 0};
    const char *msg;
    double secs;
    sqlite3_progress_handler(db, 1000, stop_after_deadline, &p);
    int rc = sql_call(db, "SELECT sentiment(?1, ?2)", "xlmr", text, len, &secs, &msg);
    sqlite3_progress_handler(db, 0, NULL, NULL);
    if (rc == SQLITE_ROW) fail_msg("sentiment() of %zu bytes ignored the progress handler", len);
    if (!strstr(msg, "interrupted")) fail_msg("error '%s' does not say interrupted", msg);
    if (secs > HANG_S) fail_msg("stopped only after %.1f s", secs);
    expect_text(db, "SELECT sentiment('好', 'xlmr') IS NOT NULL", "1");
    free(text);
    sqlite3_close(db);
}

/* A model directory like xlmr_tiny whose tokenizer.json has one more
 * Unigram piece, 60,000 bytes long: sentiment_load refuses it, naming it. */
static void test_hostile_piece_refused(void **state)
{
    (void)state;
    size_t n;
    char dir[] = "/tmp/sentiment-hostile-XXXXXX", path[256], cmd[512];
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cp " XLMR_MODEL "/config.json " XLMR_MODEL
             "/model.safetensors %s/", dir);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(XLMR_MODEL "/tokenizer.json", "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *json = malloc((size_t)sz + 1);
    assert_non_null(json);
    assert_int_equal(fread(json, 1, (size_t)sz, f), (size_t)sz);
    json[sz] = '\0';
    fclose(f);
    /* the first Unigram entry: insert the long piece before it */
    char *vocab = strstr(json, "\"vocab\"");
    assert_non_null(vocab);
    char *first = strchr(vocab, '[');
    assert_non_null(first);
    first++;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    n = (size_t)(first - json);
    assert_int_equal(fwrite(json, 1, n, f), n);
    fputs("[\"", f);
    for (int i = 0; i < 60000; i++)
        fputc('q', f);
    fputs("\", -30.0],", f);
    fputs(first, f);
    fclose(f);
    free(json);

    sqlite3 *db = open_db();
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT sentiment_load('hostile', '%s')", dir);
    expect_error(db, sql, "Unigram piece 0 is 60000 bytes long; at most 1024 are supported");
    sqlite3_close(db);
    snprintf(cmd, sizeof cmd, "rm -r %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_progress_handler_builtin),
        cmocka_unit_test(test_progress_handler_tokenizer_json),
        cmocka_unit_test(test_interrupt_builtin),
        cmocka_unit_test(test_interrupt_tokenizer_json),
        cmocka_unit_test(test_hostile_piece_refused),
        cmocka_unit_test(test_progress_handler_classify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
