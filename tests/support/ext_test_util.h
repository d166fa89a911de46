/* ext_test_util.h: helpers shared by the extension tests (tests/test_ext_*.c).
 *
 * Tests run from the repository root. open_db() opens an in-memory database
 * with the extension registered through sqlite3_auto_extension (the entry
 * point receives the real API table, as with .load). The q_* helpers run
 * one query and return its first column; they fail the test on an
 * unexpected error. expect_error() runs SQL that must fail and checks the
 * message contains a given text.
 */
#ifndef EXT_TEST_UTIL_H
#define EXT_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#define TINY_MODEL "tests/fixtures/models/bert_tiny"
#define ERNIE_MODEL "tests/fixtures/models/ernie_tiny"

int sqlite3_sentiment_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

static inline void exec_ok(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) fail_msg("SQL failed: %s\n  %s", err ? err : "?", sql);
}

/* A connection with the extension and its default settings. */
static inline sqlite3 *open_db_defaults(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_auto_extension((void (*)(void))sqlite3_sentiment_init);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    return db;
}

/* The same with one CPU thread: the tiny test models gain nothing from
 * more, and the suite's time then does not depend on how busy the machine
 * is. */
static inline sqlite3 *open_db_path(const char *path)
{
    sqlite3 *db = open_db_defaults(path);
    exec_ok(db, "SELECT sentiment_config('threads', 1)");
    return db;
}

static inline sqlite3 *open_db(void)
{
    return open_db_path(":memory:");
}

static inline sqlite3_stmt *prepare(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("prepare failed: %s\n  %s", sqlite3_errmsg(db), sql);
    return st;
}

/* First column of the first row as text (malloc'd; NULL for SQL NULL). */
static inline char *q_text(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = prepare(db, sql);
    char *out = NULL;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) fail_msg("no row (%s): %s\n  %s", sqlite3_errstr(rc), sqlite3_errmsg(db), sql);
    if (sqlite3_column_type(st, 0) != SQLITE_NULL)
        out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}

static inline int64_t q_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = prepare(db, sql);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) fail_msg("no row (%s): %s\n  %s", sqlite3_errstr(rc), sqlite3_errmsg(db), sql);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static inline double q_double(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = prepare(db, sql);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) fail_msg("no row (%s): %s\n  %s", sqlite3_errstr(rc), sqlite3_errmsg(db), sql);
    double v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* 1 when the first column of the first row is SQL NULL. */
static inline int q_is_null(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = prepare(db, sql);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) fail_msg("no row (%s): %s\n  %s", sqlite3_errstr(rc), sqlite3_errmsg(db), sql);
    int isnull = sqlite3_column_type(st, 0) == SQLITE_NULL;
    sqlite3_finalize(st);
    return isnull;
}

static inline void expect_text(sqlite3 *db, const char *sql, const char *want)
{
    char *got = q_text(db, sql);
    if (!got || strcmp(got, want)) fail_msg("got '%s', want '%s'\n  %s", got ? got : "NULL", want, sql);
    free(got);
}

/* Runs sql (all of it) and requires an error whose message contains want. */
static inline void expect_error(sqlite3 *db, const char *sql, const char *want)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc == SQLITE_OK) fail_msg("expected an error containing '%s'\n  %s", want, sql);
    if (!err || !strstr(err, want))
        fail_msg("error '%s' does not contain '%s'\n  %s", err ? err : "(none)", want, sql);
    sqlite3_free(err);
}

/* A JSON number out of sentiment_debug(), e.g. "$.cache.loads". */
static inline int64_t debug_int(sqlite3 *db, const char *path)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT json_extract(sentiment_debug(), '%s')", path);
    return q_int(db, sql);
}

/* A table t(id INTEGER PRIMARY KEY, body) with texts written for these
 * tests, including NULL, empty and white-space rows; returns its size. */
static inline int make_reviews(sqlite3 *db)
{
    static const char *const texts[] = {
        "房间干净整洁，前台服务热情，下次还来。",
        NULL,
        "",
        "   ",
        "外卖送得太慢了，饭都凉了，差评。",
        "耳机音质不错，就是续航一般。",
        "\xe3\x80\x80", /* ideographic space only */
        "酒店位置很好，离地铁站只有五分钟。",
        "包装破损，客服也不理人，非常失望。",
        "味道还可以，分量有点少。",
        "性价比很高，推荐购买！",
        "空调噪音太大，一晚上没睡好。",
        "快递很快，第二天就到了，东西也不错。",
        "菜品一般，价格偏贵，不会再点。",
        "Good value, 服务 friendly, would stay again.",
        "屏幕有坏点，申请退货中。",
        "早餐种类丰富，服务员很有礼貌。",
        "手机壳的颜色和图片不一样。",
        "宝贝收到了，质量很好，物超所值。",
        "等了一个半小时才送到，汤都洒了。",
    };
    int n = (int)(sizeof texts / sizeof *texts);
    sqlite3_stmt *st;
    exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, body)");
    st = prepare(db, "INSERT INTO t(body) VALUES (?1)");
    for (int i = 0; i < n; i++) {
        if (texts[i]) sqlite3_bind_text(st, 1, texts[i], -1, SQLITE_STATIC);
        else sqlite3_bind_null(st, 1);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return n;
}

static inline void load_tiny(sqlite3 *db)
{
    exec_ok(db, "SELECT sentiment_load('tiny', '" TINY_MODEL "')");
}

#endif
