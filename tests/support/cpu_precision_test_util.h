/* cpu_precision_test_util.h: what precision auto runs a model with, read
 * from sentiment_models.cpu_precision, for the INT8 check's tests
 * (test_ext_train_int8.c, test_ext_int8_check.c). Include after
 * ext_test_util.h.
 */
#ifndef CPU_PRECISION_TEST_UTIL_H
#define CPU_PRECISION_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

static inline int starts(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

/* sentiment_models.cpu_precision of model name (malloc'd; a failure when
 * the model is not listed). */
static inline char *cpu_precision(sqlite3 *db, const char *name)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT cpu_precision FROM sentiment_models WHERE name = '%s'",
             name);
    char *s = q_text(db, sql);
    assert_non_null(s);
    return s;
}

#endif
