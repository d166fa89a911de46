/* bench_sql.c: rows/s of the SQL front door against the engine called
 * directly from C, on real review texts.
 *
 *   build/bench/bench_sql [--data FILE.tsv] [--rows N] [--model DIR]
 *                         [--batch B] [--threads T] [--frame F]
 *                         [--scalar-rows N] [--repeat R] [--ext PATH]
 *                         [--precision auto|fp32|int8]
 *
 * Reads N texts (default 20,000) from column 2 of a TSV with a header
 * (default ../shared/data/online_shopping_10_cats/all.tsv; the texts are
 * read at run time, never copied into the project) into an in-memory
 * table, loads build/sentiment.so into SQLite, registers the model
 * directory (default model/builtin when present, else the tiny test model;
 * --model builtin: the model embedded in sentiment.so, under its name
 * 'default', with the direct path reading model/builtin)
 * and times, best of R runs:
 *
 *   sentiment()  SELECT count(sentiment(text, m)) FROM reviews   (first
 *                --scalar-rows rows: one encoder call per row)
 *   latency      SELECT sentiment(?1, m), one statement per text, each
 *                timed alone: median and 90th percentile milliseconds
 *   classify     SELECT count(label) FROM classify('reviews', 'text', m)
 *   window       sentiment_batch(text, m) OVER (ROWS BETWEEN CURRENT ROW
 *                AND F-1 FOLLOWING)
 *   direct C     bert_classify_texts() on the same batches of B rows, in
 *                the same order, with the same backend settings
 *
 * all on the CPU backend (the direct path is CPU-only, so SQL is pinned to
 * device 'cpu' for a like-for-like ratio), and prints rows/s and the ratio classify / direct (target >= 0.9), by
 * wall time and by process CPU time (the fair measure when other programs
 * share the cores; use --threads 1 then). It also checks that classify and
 * the direct engine agree on every label. --precision (default auto, what a
 * user gets) is set on the SQL side; the direct path uses the same weights,
 * packed once before timing: INT8 when that is what int8 or auto means here
 * (auto: the built-in model, --model builtin, on a CPU with AVX512-VNNI),
 * else FP32 as the extension runs it (packed where the CPU has AVX-512F).
 *
 * SQLite is opened with dlopen (libsqlite3.so.0), so this program links
 * only the model library, as the Makefile builds benches.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"

/* The SQLite calls used, resolved at run time. */
static struct {
    int (*open)(const char *, sqlite3 **);
    int (*close)(sqlite3 *);
    int (*exec)(sqlite3 *, const char *, int (*)(void *, int, char **, char **), void *, char **);
    void (*free)(void *);
    int (*prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
    int (*bind_text)(sqlite3_stmt *, int, const char *, int, void (*)(void *));
    int (*bind_int)(sqlite3_stmt *, int, int);
    int (*step)(sqlite3_stmt *);
    int (*reset)(sqlite3_stmt *);
    int (*finalize)(sqlite3_stmt *);
    sqlite3_int64 (*column_int64)(sqlite3_stmt *, int);
    const unsigned char *(*column_text)(sqlite3_stmt *, int);
    const char *(*errmsg)(sqlite3 *);
    int (*enable_load_extension)(sqlite3 *, int);
    int (*load_extension)(sqlite3 *, const char *, const char *, char **);
} S;

static int load_sqlite(void)
{
    void *h = dlopen("libsqlite3.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "bench_sql: cannot load libsqlite3.so.0: %s\n", dlerror());
        return 1;
    }
#define SYM(f)                                                                   \
    do {                                                                         \
        *(void **)&S.f = dlsym(h, "sqlite3_" #f);                                \
        if (!S.f) {                                                              \
            fprintf(stderr, "bench_sql: libsqlite3 lacks sqlite3_%s\n", #f);     \
            return 1;                                                            \
        }                                                                        \
    } while (0)
    SYM(open);
    SYM(close);
    SYM(exec);
    SYM(free);
    SYM(prepare_v2);
    SYM(bind_text);
    SYM(bind_int);
    SYM(step);
    SYM(reset);
    SYM(finalize);
    SYM(column_int64);
    SYM(column_text);
    SYM(errmsg);
    SYM(enable_load_extension);
    SYM(load_extension);
#undef SYM
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (all threads): on a busy machine this,
 * not wall time, measures the work done. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct timing {
    double wall, cpu; /* best of the runs */
} timing;

static void timing_add(timing *t, double wall, double cpu)
{
    if (wall < t->wall) t->wall = wall;
    if (cpu < t->cpu) t->cpu = cpu;
}

/* Column 2 of each line after the header, up to max texts. */
static int read_texts(const char *path, int max, char ***texts_out, int *n_out)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0, lineno = 0;
    char **texts = calloc((size_t)max, sizeof *texts);
    if (!f || !texts) {
        fprintf(stderr, "bench_sql: cannot read %s\n", path);
        if (f) fclose(f);
        free(texts);
        return 1;
    }
    while (n < max && (len = getline(&line, &cap, f)) > 0) {
        if (lineno++ == 0) continue; /* header */
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        char *text = tab + 1, *end = strchr(text, '\t');
        if (end) *end = 0;
        if (!*text) continue;
        texts[n++] = strdup(text);
    }
    free(line);
    fclose(f);
    *texts_out = texts;
    *n_out = n;
    return 0;
}

static int exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (S.exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "bench_sql: %s\n  %s\n", err ? err : "?", sql);
        S.free(err);
        return 1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The model's name in SQL: 'bench' (sentiment_load of --model), or
 * 'default' for --model builtin (the copy embedded in sentiment.so). */
static const char *g_model = "bench";

/* Times `SELECT sentiment(?1, m)` alone for each of the first n
 * texts: the latency a caller classifying one row at a time sees. */
static int single_row_latency(sqlite3 *db, char **texts, int n, double *median_ms, double *p90_ms)
{
    sqlite3_stmt *st = NULL;
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT sentiment(?1, '%s')", g_model);
    double *ms = malloc((size_t)n * sizeof *ms);
    if (!ms || S.prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        free(ms);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        double t0 = now_s();
        S.bind_text(st, 1, texts[i], -1, SQLITE_STATIC);
        if (S.step(st) != SQLITE_ROW) {
            fprintf(stderr, "bench_sql: %s\n", S.errmsg(db));
            S.finalize(st);
            free(ms);
            return 1;
        }
        S.reset(st);
        ms[i] = (now_s() - t0) * 1e3;
    }
    S.finalize(st);
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    *median_ms = ms[n / 2];
    *p90_ms = ms[(int)(n * 0.9)];
    free(ms);
    return 0;
}

/* Runs a query returning one integer; best time of `repeat` runs. */
static int timed_count(sqlite3 *db, const char *sql, int repeat, timing *best, long long *count)
{
    best->wall = best->cpu = 1e30;
    for (int r = 0; r < repeat; r++) {
        sqlite3_stmt *st = NULL;
        double t0 = now_s(), c0 = cpu_s();
        if (S.prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK || S.step(st) != SQLITE_ROW) {
            fprintf(stderr, "bench_sql: %s\n  %s\n", S.errmsg(db), sql);
            S.finalize(st);
            return 1;
        }
        *count = S.column_int64(st, 0);
        S.finalize(st);
        timing_add(best, now_s() - t0, cpu_s() - c0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *data = "../shared/data/online_shopping_10_cats/all.tsv";
    const char *model_dir = access("model/builtin/model.safetensors", R_OK) == 0
                                ? "model/builtin"
                                : "tests/fixtures/models/bert_tiny";
    const char *ext = "build/sentiment";
    const char *precision = "auto";
    bert_packed_params *packed = NULL;
    int rows = 20000, batch = 32, threads = 0, frame = 256, scalar_rows = 2000, repeat = 3;
    char **texts = NULL, err[SM_ERR_MAX], sql[512];
    int n = 0, rc = 1;
    sqlite3 *db = NULL;
    sqlite3_stmt *ins = NULL;
    bert_model *m = NULL;
    backend *be = NULL;
    bert_workspace *ws = NULL;
    float *probs = NULL;
    int *trunc = NULL;
    size_t *lens = NULL;

    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(argv[i], "--data")) data = v;
        else if (!strcmp(argv[i], "--rows")) rows = atoi(v);
        else if (!strcmp(argv[i], "--model")) model_dir = v;
        else if (!strcmp(argv[i], "--batch")) batch = atoi(v);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(v);
        else if (!strcmp(argv[i], "--frame")) frame = atoi(v);
        else if (!strcmp(argv[i], "--scalar-rows")) scalar_rows = atoi(v);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(v);
        else if (!strcmp(argv[i], "--ext")) ext = v;
        else if (!strcmp(argv[i], "--precision") &&
                 (!strcmp(v, "auto") || !strcmp(v, "fp32") || !strcmp(v, "int8")))
            precision = v;
        else goto usage;
        i++;
    }
    if (rows < 1 || batch < 1 || frame < 1 || repeat < 1 || scalar_rows < 0) goto usage;
    /* --model builtin: SQL uses the embedded copy ('default'), the direct
     * path the same files from model/builtin */
    int builtin = !strcmp(model_dir, "builtin");
    if (builtin) {
        model_dir = "model/builtin";
        g_model = "default";
    }
    if (access(data, R_OK) != 0 && access("/work/shared/data/online_shopping_10_cats/all.tsv", R_OK) == 0 &&
        !strcmp(data, "../shared/data/online_shopping_10_cats/all.tsv"))
        data = "/work/shared/data/online_shopping_10_cats/all.tsv";
    if (load_sqlite() || read_texts(data, rows, &texts, &n)) return 1;
    if (scalar_rows > n) scalar_rows = n;
    lens = malloc((size_t)n * sizeof *lens);
    for (int i = 0; i < n; i++) lens[i] = strlen(texts[i]);

    /* --- SQL --- */
    if (S.open(":memory:", &db) != SQLITE_OK) goto end;
    S.enable_load_extension(db, 1);
    {
        char *e = NULL;
        if (S.load_extension(db, ext, NULL, &e) != SQLITE_OK) {
            fprintf(stderr, "bench_sql: cannot load %s: %s\n", ext, e ? e : "?");
            S.free(e);
            goto end;
        }
    }
    if (exec(db, "CREATE TABLE reviews(id INTEGER PRIMARY KEY, text TEXT); BEGIN")) goto end;
    if (S.prepare_v2(db, "INSERT INTO reviews(text) VALUES (?1)", -1, &ins, NULL) != SQLITE_OK) goto end;
    for (int i = 0; i < n; i++) {
        S.bind_text(ins, 1, texts[i], -1, SQLITE_STATIC);
        if (S.step(ins) != SQLITE_DONE) goto end;
        S.reset(ins);
    }
    S.finalize(ins);
    ins = NULL;
    if (exec(db, "COMMIT")) goto end;
    if (!builtin) {
        snprintf(sql, sizeof sql, "SELECT sentiment_load('bench', '%s')", model_dir);
        if (exec(db, sql)) goto end;
    }
    snprintf(sql, sizeof sql, "SELECT sentiment_config('device', 'cpu'), sentiment_config('batch_size', %d), "
                              "sentiment_config('threads', %d), sentiment_config('progress', 'off'), "
                              "sentiment_config('precision', '%s')",
             batch, threads, precision);
    if (exec(db, sql)) goto end;

    timing t_scalar = {1, 1}, t_classify, t_window, t_direct = {1e30, 1e30};
    long long c_scalar = 0, c_classify, c_window;
    double lat_median = 0, lat_p90 = 0;
    /* warm up: load, workspaces, BLAS threads */
    snprintf(sql, sizeof sql,
             "SELECT count(label) FROM classify('SELECT id, text FROM reviews LIMIT 256', '%s')", g_model);
    if (exec(db, sql)) goto end;
    if (scalar_rows > 0) {
        snprintf(sql, sizeof sql, "SELECT count(sentiment(text, '%s')) FROM reviews WHERE id <= %d",
                 g_model, scalar_rows);
        if (timed_count(db, sql, repeat, &t_scalar, &c_scalar)) goto end;
        if (single_row_latency(db, texts, scalar_rows < 1000 ? scalar_rows : 1000, &lat_median,
                               &lat_p90))
            goto end;
    }
    snprintf(sql, sizeof sql, "SELECT count(label) FROM classify('reviews', 'text', '%s')", g_model);
    if (timed_count(db, sql, repeat, &t_classify, &c_classify)) goto end;
    snprintf(sql, sizeof sql,
             "SELECT count(w) FROM (SELECT sentiment_batch(text, '%s') OVER "
             "(ROWS BETWEEN CURRENT ROW AND %d FOLLOWING) AS w FROM reviews)",
             g_model, frame - 1);
    if (timed_count(db, sql, repeat, &t_window, &c_window)) goto end;

    /* --- the engine directly, same batches --- */
    if (bert_model_load_dir(model_dir, &m, err) || backend_cpu_create(threads, &be, err)) {
        fprintf(stderr, "bench_sql: %s\n", err);
        goto end;
    }
    int maxlen = bert_max_length(&m->cfg), K = m->cfg.num_labels;
    /* the weights the SQL side uses: INT8 for int8, and for auto on a CPU
     * with VNNI (runtime/device.c) */
    int int8 = !strcmp(precision, "int8") ||
               (!strcmp(precision, "auto") && backend_cpu_pack_native(BACKEND_PACK_INT8) && builtin);
    const bert_params *params = &m->p;
    bert_precision kind = int8                      ? BERT_INT8
                          : backend_cpu_fp32_packed() ? BERT_FP32_PACKED
                                                      : BERT_FP32;
    if (kind != BERT_FP32) {
        bert_precision plan[BERT_PACK_N];
        bert_pack_plan(kind, plan);
        if (bert_params_pack(be, &m->cfg, &m->p, plan, &packed, err)) {
            fprintf(stderr, "bench_sql: %s\n", err);
            goto end;
        }
        params = &packed->p;
    }
    if (bert_workspace_create(be, &m->cfg, batch, maxlen, &ws, err)) {
        fprintf(stderr, "bench_sql: %s\n", err);
        goto end;
    }
    probs = malloc((size_t)n * K * sizeof *probs);
    trunc = malloc((size_t)n * sizeof *trunc);
    for (int r = 0; r < repeat + 1; r++) { /* the first run warms up */
        double t0 = now_s(), c0 = cpu_s();
        for (int first = 0; first < n; first += batch) {
            int b = n - first < batch ? n - first : batch;
            if (bert_classify_texts(m, params, ws, (const char *const *)texts + first, lens + first, b, maxlen,
                                    batch, probs + (size_t)first * K, trunc + first, err)) {
                fprintf(stderr, "bench_sql: %s\n", err);
                goto end;
            }
        }
        if (r > 0) timing_add(&t_direct, now_s() - t0, cpu_s() - c0);
    }

    /* the labels agree */
    {
        sqlite3_stmt *st = NULL;
        int i = 0, differ = 0, truncated = 0;
        snprintf(sql, sizeof sql, "SELECT label FROM classify('reviews', 'text', '%s')", g_model);
        S.prepare_v2(db, sql, -1, &st, NULL);
        while (S.step(st) == SQLITE_ROW && i < n) {
            const float *p = probs + (size_t)i * K;
            int top = 0;
            for (int k = 1; k < K; k++)
                if (p[k] > p[top]) top = k;
            if (strcmp((const char *)S.column_text(st, 0), m->cfg.id2label[top])) differ++;
            truncated += trunc[i];
            i++;
        }
        S.finalize(st);
        printf("bench_sql: %d texts from %s\n", n, data);
        printf("model %s (%d layers, hidden %d, max_length %d), batch %d, %d thread%s, %d truncated, "
               "precision %s (%s)\n",
               model_dir, m->cfg.num_hidden_layers, m->cfg.hidden_size, maxlen, batch,
               backend_cpu_threads(be), backend_cpu_threads(be) == 1 ? "" : "s", truncated,
               precision, int8 ? "int8" : "fp32");
        printf("%-34s %8s %9s %10s %9s %12s\n", "path", "rows", "seconds", "rows/s", "cpu s",
               "rows/cpu-s");
#define ROW(name, rows, t)                                                               \
    printf("%-34s %8lld %9.3f %10.0f %9.3f %12.0f\n", name, (long long)(rows), (t).wall, \
           (rows) / (t).wall, (t).cpu, (rows) / (t).cpu)
        if (scalar_rows > 0) ROW("sentiment() per row", c_scalar, t_scalar);
        ROW("classify", c_classify, t_classify);
        snprintf(sql, sizeof sql, "sentiment_batch() OVER (%d rows)", frame);
        ROW(sql, c_window, t_window);
        ROW("direct C (bert_classify_texts)", n, t_direct);
#undef ROW
        if (scalar_rows > 0)
            printf("single-row sentiment() latency over %d texts: median %.2f ms, p90 %.2f ms\n",
                   scalar_rows < 1000 ? scalar_rows : 1000, lat_median, lat_p90);
        printf("classify / direct = %.3f wall, %.3f cpu (target >= 0.90); window / direct = %.3f wall, "
               "%.3f cpu; label differences: %d\n",
               t_direct.wall / t_classify.wall, t_direct.cpu / t_classify.cpu, t_direct.wall / t_window.wall,
               t_direct.cpu / t_window.cpu, differ);
        rc = differ ? 1 : 0;
    }
    goto end;
usage:
    fprintf(stderr, "usage: bench_sql [--data FILE.tsv] [--rows N] [--model DIR] [--batch B] [--threads T] "
                    "[--frame F] [--scalar-rows N] [--repeat R] [--ext PATH] "
                    "[--precision auto|fp32|int8]\n");
    return 2;
end:
    if (ins) S.finalize(ins);
    if (db) S.close(db);
    bert_workspace_free(ws);
    if (be) be->destroy(be);
    bert_packed_params_free(packed);
    bert_model_free(m);
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(lens);
    free(probs);
    free(trunc);
    return rc;
}
