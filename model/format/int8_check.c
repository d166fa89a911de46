/* int8_check.c: config.json's "int8_check" key read, written and judged
 * (int8_check.h).
 */
#include "format/int8_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/errors.h"

static const char k_key[] = "config.json: 'int8_check'";

static int check(const sm_int8_check *c, char *err)
{
    const struct {
        const char *name;
        double v;
    } share[] = {{"accuracy_fp32", c->accuracy_fp32},
                 {"accuracy_int8", c->accuracy_int8},
                 {"agreement", c->agreement}};
    if (c->rows < 1)
        return sm_error(err, SM_ERR_FORMAT, "%s: 'rows' %d: expected 1 or more", k_key, c->rows);
    for (size_t i = 0; i < sizeof share / sizeof *share; i++)
        if (!(share[i].v >= 0.0 && share[i].v <= 1.0))
            return sm_error(err, SM_ERR_FORMAT, "%s: '%s' %g: expected a share from 0 to 1", k_key,
                            share[i].name, share[i].v);
    return SM_OK;
}

static int get_share(const json_in_value *obj, const char *key, double *out, char *err)
{
    char buf[80];
    const json_in_value *v = json_in_get(obj, key);
    if (!json_in_is(v, JSON_IN_NUMBER))
        return sm_error(err, SM_ERR_FORMAT, "%s: '%s' must be a number, got %s", k_key, key,
                        v ? json_in_describe(v, buf, 64) : "nothing");
    *out = v->is_int ? (double)v->i : v->d;
    return SM_OK;
}

int sm_int8_check_from_json(const json_in_value *v, sm_int8_check *out, char *err)
{
    char buf[80];
    sm_int8_check c = {0};
    int rc;
    if (!json_in_is(v, JSON_IN_OBJECT))
        return sm_error(err, SM_ERR_FORMAT,
                        "%s must be an object such as {\"rows\": 812, \"accuracy_fp32\": 0.91, "
                        "...}, got %s",
                        k_key, json_in_describe(v, buf, 64));
    const json_in_value *r = json_in_get(v, "rows");
    if (!json_in_is(r, JSON_IN_NUMBER) || !r->is_int || r->i < 1 || r->i > 0x7fffffff)
        return sm_error(err, SM_ERR_FORMAT, "%s: 'rows' must be an integer of 1 or more, got %s",
                        k_key, r ? json_in_describe(r, buf, 64) : "nothing");
    c.rows = (int)r->i;
    if ((rc = get_share(v, "accuracy_fp32", &c.accuracy_fp32, err)) ||
        (rc = get_share(v, "accuracy_int8", &c.accuracy_int8, err)) ||
        (rc = get_share(v, "agreement", &c.agreement, err)) || (rc = check(&c, err)))
        return rc;
    c.set = 1;
    *out = c;
    return SM_OK;
}

int sm_int8_check_to_json(const sm_int8_check *c, char **out, char *err)
{
    int rc;
    *out = NULL;
    if ((rc = check(c, err))) return rc;
    char *s = malloc(200);
    if (!s) return sm_error(err, SM_ERR_NOMEM, "out of memory writing the int8 check");
    /* %.17g: read back to the same doubles */
    snprintf(s, 200,
             "{\"rows\": %d, \"accuracy_fp32\": %.17g, \"accuracy_int8\": %.17g, "
             "\"agreement\": %.17g}",
             c->rows, c->accuracy_fp32, c->accuracy_int8, c->agreement);
    *out = s;
    return SM_OK;
}

int sm_int8_check_passes(const sm_int8_check *c, char *why, size_t cap)
{
    char tmp[8];
    if (!why || !cap) {
        why = tmp;
        cap = sizeof tmp;
    }
    if (!c->set) {
        snprintf(why, cap, "int8 not checked for this model");
        return 0;
    }
    const char *verdict = NULL;
    if (c->rows < SM_INT8_CHECK_MIN_ROWS) verdict = "too few rows to judge int8";
    else if (c->agreement < SM_INT8_CHECK_MIN_AGREEMENT) verdict = "int8 changes too many labels";
    else if (c->accuracy_int8 < c->accuracy_fp32 - SM_INT8_CHECK_MARGIN)
        verdict = "int8 loses accuracy";
    snprintf(why, cap,
             "%s%sheld-out accuracy %.4f in int8, %.4f in fp32, same label on %.1f%% "
             "of %d rows",
             verdict ? verdict : "", verdict ? ": " : "", c->accuracy_int8, c->accuracy_fp32,
             100.0 * c->agreement, c->rows);
    return verdict == NULL;
}
