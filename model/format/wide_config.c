/* wide_config.c: config.json's "wide" key (wide_config.h) read and
 * written. Reads with json_in, writes plain text; owns nothing.
 */
#include "format/wide_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

static const char k_key[] = "config.json: 'wide'";

void sm_wide_config_none(sm_wide_config *c)
{
    memset(c, 0, sizeof *c);
}

void sm_wide_config_default(sm_wide_config *c)
{
    c->set = 1;
    c->ngram_min = 1;
    c->ngram_max = 3;
    c->buckets = 1 << 18;
    c->lowercase = 1;
    c->sublinear_tf = 1;
    c->idf = 1;
    c->l2_norm = 1;
}

int sm_wide_config_check(const sm_wide_config *c, char *err)
{
    if (c->ngram_min < 1 || c->ngram_max < c->ngram_min || c->ngram_max > SM_WIDE_MAX_NGRAM)
        return sm_error(err, SM_ERR_INVALID,
                        "wide: ngram_range [%d, %d]: expected 1 <= min <= max <= %d", c->ngram_min,
                        c->ngram_max, SM_WIDE_MAX_NGRAM);
    if (c->buckets < 1 || c->buckets > SM_WIDE_MAX_BUCKETS)
        return sm_error(err, SM_ERR_INVALID, "wide: buckets %d: expected 1..%d", c->buckets,
                        SM_WIDE_MAX_BUCKETS);
    return SM_OK;
}

/* A string member that must be one of two names: *out = 1 for yes, 0 for
 * no. Absent: *out = dflt when dflt >= 0, else an error. */
static int get_choice(const json_in_value *obj, const char *key, const char *yes, const char *no,
                      int dflt, int *out, char *err)
{
    char buf[80];
    const json_in_value *v = json_in_get(obj, key);
    if (!v || json_in_is(v, JSON_IN_NULL)) {
        if (dflt >= 0) {
            *out = dflt;
            return SM_OK;
        }
        return sm_error(err, SM_ERR_FORMAT, "%s: '%s' is missing; expected \"%s\" or \"%s\"", k_key,
                        key, yes, no);
    }
    if (json_in_is(v, JSON_IN_STRING) && !strcmp(v->str, yes)) *out = 1;
    else if (json_in_is(v, JSON_IN_STRING) && !strcmp(v->str, no)) *out = 0;
    else
        return sm_error(err, SM_ERR_FORMAT, "%s: '%s' must be \"%s\" or \"%s\", got %s", k_key, key,
                        yes, no, json_in_describe(v, buf, 64));
    return SM_OK;
}

/* A string member that must equal `only` (the one kind we have). */
static int get_only(const json_in_value *obj, const char *key, const char *only, char *err)
{
    char buf[80];
    const json_in_value *v = json_in_get(obj, key);
    if (!v)
        return sm_error(err, SM_ERR_FORMAT, "%s: '%s' is missing; expected \"%s\"", k_key, key,
                        only);
    if (!json_in_is(v, JSON_IN_STRING) || strcmp(v->str, only))
        return sm_error(err, SM_ERR_UNSUPPORTED, "%s: '%s' %s is not supported; expected \"%s\"",
                        k_key, key, json_in_describe(v, buf, 64), only);
    return SM_OK;
}

static int get_int_item(const json_in_value *v, int *out)
{
    if (!json_in_is(v, JSON_IN_NUMBER) || !v->is_int || v->i < 0 || v->i > SM_WIDE_MAX_BUCKETS)
        return -1;
    *out = (int)v->i;
    return 0;
}

int sm_wide_config_from_json(const json_in_value *v, sm_wide_config *out, char *err)
{
    char buf[80];
    sm_wide_config c;
    int rc;
    sm_wide_config_none(&c);
    if (!json_in_is(v, JSON_IN_OBJECT))
        return sm_error(err, SM_ERR_FORMAT,
                        "%s must be an object such as {\"features\": \"char_ngrams\", "
                        "\"ngram_range\": [1, 3], ...}, got %s",
                        k_key, json_in_describe(v, buf, 64));
    if ((rc = get_only(v, "features", "char_ngrams", err)) ||
        (rc = get_only(v, "hash", "murmur3_32", err)))
        return rc;
    const json_in_value *r = json_in_get(v, "ngram_range");
    if (!json_in_is(r, JSON_IN_ARRAY) || r->n != 2 || get_int_item(&r->items[0], &c.ngram_min) ||
        get_int_item(&r->items[1], &c.ngram_max))
        return sm_error(err, SM_ERR_FORMAT, "%s: 'ngram_range' must be [min, max], got %s", k_key,
                        r ? json_in_describe(r, buf, 64) : "nothing");
    const json_in_value *b = json_in_get(v, "buckets");
    if (!json_in_is(b, JSON_IN_NUMBER) || !b->is_int)
        return sm_error(err, SM_ERR_FORMAT, "%s: 'buckets' must be an integer, got %s", k_key,
                        b ? json_in_describe(b, buf, 64) : "nothing");
    if (b->i < 1 || b->i > SM_WIDE_MAX_BUCKETS)
        return sm_error(err, SM_ERR_FORMAT, "%s: 'buckets' %lld: expected 1..%d", k_key,
                        (long long)b->i, SM_WIDE_MAX_BUCKETS);
    c.buckets = (int)b->i;
    if ((rc = get_choice(v, "lowercase", "ascii", "none", 1, &c.lowercase, err)) ||
        (rc = get_choice(v, "tf", "sublinear", "raw", -1, &c.sublinear_tf, err)) ||
        (rc = get_choice(v, "norm", "l2", "none", -1, &c.l2_norm, err)))
        return rc;
    const json_in_value *idf = json_in_get(v, "idf");
    if (!json_in_is(idf, JSON_IN_TRUE) && !json_in_is(idf, JSON_IN_FALSE))
        return sm_error(err, SM_ERR_FORMAT, "%s: 'idf' must be true or false, got %s", k_key,
                        idf ? json_in_describe(idf, buf, 64) : "nothing");
    c.idf = json_in_is(idf, JSON_IN_TRUE);
    char sub[SM_ERR_MAX];
    if (sm_wide_config_check(&c, sub)) return sm_error(err, SM_ERR_FORMAT, "config.json: %s", sub);
    c.set = 1;
    *out = c;
    return SM_OK;
}

int sm_wide_config_to_json(const sm_wide_config *c, char **out, char *err)
{
    int rc;
    *out = NULL;
    if ((rc = sm_wide_config_check(c, err))) return rc;
    char *s = malloc(320);
    if (!s) return sm_error(err, SM_ERR_NOMEM, "out of memory writing the wide config");
    snprintf(s, 320,
             "{\"features\": \"char_ngrams\", \"ngram_range\": [%d, %d], \"buckets\": %d, "
             "\"hash\": \"murmur3_32\", \"lowercase\": \"%s\", \"tf\": \"%s\", \"idf\": %s, "
             "\"norm\": \"%s\"}",
             c->ngram_min, c->ngram_max, c->buckets, c->lowercase ? "ascii" : "none",
             c->sublinear_tf ? "sublinear" : "raw", c->idf ? "true" : "false",
             c->l2_norm ? "l2" : "none");
    *out = s;
    return SM_OK;
}
