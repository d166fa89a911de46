/* rare_rows_test_util.h: labelled rows whose label only a character
 * n-gram model can read (for train() tests with the wide part): each text
 * is two common words and two characters the tiny fixture model's
 * vocabulary lacks (so its encoder sees [UNK]), positive or negative; and
 * jnum, a number out of a JSON report. Include after ext_test_util.h.
 */
#ifndef RARE_ROWS_TEST_UTIL_H
#define RARE_ROWS_TEST_UTIL_H

static const char *const k_rare_pos[] = {"鑫", "燊", "犇", "骉", "淼", "焱", "垚", "赟"};
static const char *const k_rare_neg[] = {"囧", "槑", "嘦", "烎", "氼", "嫑", "巭", "靐"};
static const char *const k_rare_filler[] = {"这家", "酒店", "房间", "服务",
                                            "东西", "外卖", "今天", "感觉"};

static inline unsigned rare_lcg(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 16) & 0x7fff;
}

/* Table `name`(t TEXT, y TEXT) with n rows, alternately positive and
 * negative. */
static inline void make_rare(sqlite3 *db, const char *name, int n, unsigned seed)
{
    char sql[128], text[256];
    snprintf(sql, sizeof sql, "CREATE TABLE %s(t TEXT, y TEXT)", name);
    exec_ok(db, sql);
    snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (?1, ?2)", name);
    sqlite3_stmt *st = prepare(db, sql);
    for (int i = 0; i < n; i++) {
        int pos = i % 2 == 0;
        const char *const *w = pos ? k_rare_pos : k_rare_neg;
        snprintf(text, sizeof text, "%s%s%s%s", k_rare_filler[rare_lcg(&seed) % 8],
                 w[rare_lcg(&seed) % 8], k_rare_filler[rare_lcg(&seed) % 8],
                 w[rare_lcg(&seed) % 8]);
        sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, pos ? "positive" : "negative", -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
}

/* The number at path in json (a failure when it is missing). */
static inline double jnum(sqlite3 *db, const char *json, const char *path)
{
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, ?2)");
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    if (sqlite3_column_type(st, 0) == SQLITE_NULL) fail_msg("%s missing in %s", path, json);
    double v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

#endif
