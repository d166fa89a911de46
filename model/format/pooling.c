/* pooling.c: the sentence-embedding setting of a model (sentence-
 * transformers' modules.json and 1_Pooling/config.json, or our
 * "embedding_pooling" config key) and the pooled embedding of one
 * sequence. See pooling.h for the formats and what is supported. Owns only
 * the buffers it frees before returning (and the texts sm_pooling_files
 * hands over).
 */
#include "format/pooling.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/errors.h"
#include "format/file_read.h"

static const char k_transformer[] = "sentence_transformers.models.Transformer";
static const char k_pooling[] = "sentence_transformers.models.Pooling";
static const char k_normalize[] = "sentence_transformers.models.Normalize";

void sm_pooling_default(sm_pooling *p)
{
    memset(p, 0, sizeof *p);
    p->mode = SM_POOL_MEAN;
}

const char *sm_pool_mode_name(sm_pool_mode mode)
{
    return mode == SM_POOL_CLS ? "cls" : "mean";
}

/* Parses text as JSON for file; the error says where and why. */
static int parse_json(const char *file, const char *text, size_t len, json_in_doc **doc, char *err)
{
    json_in_error je;
    int rc = json_in_parse(text, len, doc, &je);
    if (rc == SM_ERR_NOMEM) return sm_error(err, SM_ERR_NOMEM, "%s: out of memory", file);
    if (rc && je.line)
        return sm_error(err, SM_ERR_FORMAT, "%s: invalid JSON (line %d, column %d): %s", file,
                        je.line, je.column, je.reason);
    if (rc) return sm_error(err, SM_ERR_FORMAT, "%s: invalid JSON: %s", file, je.reason);
    return SM_OK;
}

static const char *describe(const json_in_value *v, char *buf, size_t cap)
{
    return json_in_describe(v, buf, cap < 64 ? cap : 64);
}

/* A module path we follow: one plain directory name inside the model
 * directory (letters, digits, '_', '-', '.'; not "." or ".."). */
static int safe_module_path(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

int sm_pooling_parse_modules(const char *json, size_t len, char *pool_path, size_t cap,
                             int *normalize, char *err)
{
    static const char file[] = "modules.json";
    json_in_doc *doc = NULL;
    char buf[80];
    int rc, have_transformer = 0, have_pooling = 0;

    *normalize = 0;
    if (cap) pool_path[0] = 0;
    if ((rc = parse_json(file, json, len, &doc, err))) return rc;
    const json_in_value *root = json_in_root(doc);
    if (!json_in_is(root, JSON_IN_ARRAY)) {
        rc = sm_error(err, SM_ERR_FORMAT, "%s: expected an array of modules, got %s", file,
                      describe(root, buf, sizeof buf));
        goto end;
    }
    if (root->n > SM_POOLING_MAX_MODULES) {
        rc = sm_error(err, SM_ERR_FORMAT, "%s: %zu modules; at most %d are read", file, root->n,
                      SM_POOLING_MAX_MODULES);
        goto end;
    }
    for (size_t i = 0; i < root->n; i++) {
        const json_in_value *m = &root->items[i];
        if (!json_in_is(m, JSON_IN_OBJECT)) {
            rc = sm_error(err, SM_ERR_FORMAT, "%s: module %zu must be an object, got %s", file, i,
                          describe(m, buf, sizeof buf));
            goto end;
        }
        const json_in_value *type = json_in_get(m, "type"), *path = json_in_get(m, "path");
        if (!json_in_is(type, JSON_IN_STRING)) {
            rc = sm_error(err, SM_ERR_FORMAT, "%s: module %zu: 'type' must be a string, got %s",
                          file, i, type ? describe(type, buf, sizeof buf) : "nothing");
            goto end;
        }
        if (path && !json_in_is(path, JSON_IN_STRING) && !json_in_is(path, JSON_IN_NULL)) {
            rc = sm_error(err, SM_ERR_FORMAT, "%s: module %zu: 'path' must be a string, got %s",
                          file, i, describe(path, buf, sizeof buf));
            goto end;
        }
        const char *p = json_in_is(path, JSON_IN_STRING) ? path->str : "";
        if (!strcmp(type->str, k_transformer)) {
            if (i != 0) {
                rc = sm_error(err, SM_ERR_UNSUPPORTED,
                              "%s: module %zu is a Transformer; only the first module may be "
                              "one",
                              file, i);
                goto end;
            }
            if (*p && strcmp(p, ".")) {
                rc = sm_error(err, SM_ERR_UNSUPPORTED,
                              "%s: the Transformer module's files are in '%.64s', not in the "
                              "model directory itself; not supported",
                              file, p);
                goto end;
            }
            have_transformer = 1;
        } else if (!strcmp(type->str, k_pooling)) {
            if (!have_transformer || have_pooling) {
                rc = sm_error(err, SM_ERR_UNSUPPORTED,
                              "%s: module %zu: expected one Pooling module right after the "
                              "Transformer",
                              file, i);
                goto end;
            }
            if (!safe_module_path(p)) {
                rc = sm_error(err, SM_ERR_FORMAT,
                              "%s: module %zu: the Pooling module's 'path' must be one "
                              "directory name inside the model directory (such as '" SM_POOLING_DIR
                              "'), got %s",
                              file, i, path ? describe(path, buf, sizeof buf) : "none");
                goto end;
            }
            if (strlen(p) >= cap) {
                rc = sm_error(err, SM_ERR_INVALID, "%s: module path too long", file);
                goto end;
            }
            memcpy(pool_path, p, strlen(p) + 1);
            have_pooling = 1;
        } else if (!strcmp(type->str, k_normalize)) {
            if (!have_pooling || *normalize || i + 1 != root->n) {
                rc = sm_error(err, SM_ERR_UNSUPPORTED,
                              "%s: module %zu: a Normalize module is supported only last, "
                              "right after the Pooling module",
                              file, i);
                goto end;
            }
            *normalize = 1;
        } else {
            rc = sm_error(err, SM_ERR_UNSUPPORTED,
                          "%s: module %zu is %s; not supported (supported: Transformer, "
                          "Pooling, Normalize)",
                          file, i, describe(type, buf, sizeof buf));
            goto end;
        }
    }
    if (!have_transformer)
        rc = sm_error(err, SM_ERR_UNSUPPORTED, "%s: the first module must be '%s'", file,
                      k_transformer);
    else if (!have_pooling)
        rc = sm_error(err, SM_ERR_UNSUPPORTED, "%s: no '%s' module", file, k_pooling);
end:
    json_in_free(doc);
    return rc;
}

/* The pooling modes of sentence-transformers' Pooling config, in its order. */
static const struct {
    const char *key;
    int supported; /* 1: SM_POOL_CLS or SM_POOL_MEAN below */
    sm_pool_mode mode;
} k_modes[] = {
    {"pooling_mode_cls_token", 1, SM_POOL_CLS},
    {"pooling_mode_mean_tokens", 1, SM_POOL_MEAN},
    {"pooling_mode_max_tokens", 0, SM_POOL_MEAN},
    {"pooling_mode_mean_sqrt_len_tokens", 0, SM_POOL_MEAN},
    {"pooling_mode_weightedmean_tokens", 0, SM_POOL_MEAN},
    {"pooling_mode_lasttoken", 0, SM_POOL_MEAN},
};
#define N_MODES (sizeof k_modes / sizeof *k_modes)

int sm_pooling_parse_config(const char *json, size_t len, const char *file, sm_pooling *out,
                            char *err)
{
    json_in_doc *doc = NULL;
    char buf[80];
    int rc, n_true = 0, first = -1;

    if ((rc = parse_json(file, json, len, &doc, err))) return rc;
    const json_in_value *root = json_in_root(doc);
    if (!json_in_is(root, JSON_IN_OBJECT)) {
        rc = sm_error(err, SM_ERR_FORMAT, "%s: expected a JSON object, got %s", file,
                      describe(root, buf, sizeof buf));
        goto end;
    }
    for (size_t i = 0; i < N_MODES; i++) {
        const json_in_value *v = json_in_get(root, k_modes[i].key);
        if (!v || json_in_is(v, JSON_IN_NULL) || json_in_is(v, JSON_IN_FALSE)) continue;
        if (!json_in_is(v, JSON_IN_TRUE)) {
            rc = sm_error(err, SM_ERR_FORMAT, "%s: '%s' must be true or false, got %s", file,
                          k_modes[i].key, describe(v, buf, sizeof buf));
            goto end;
        }
        if (!n_true++) first = (int)i;
    }
    const json_in_value *v = json_in_get(root, "include_prompt");
    if (v && !json_in_is(v, JSON_IN_NULL)) {
        if (!json_in_is(v, JSON_IN_TRUE) && !json_in_is(v, JSON_IN_FALSE)) {
            rc = sm_error(err, SM_ERR_FORMAT, "%s: 'include_prompt' must be true or false, got %s",
                          file, describe(v, buf, sizeof buf));
            goto end;
        }
        if (json_in_is(v, JSON_IN_FALSE)) {
            rc = sm_error(err, SM_ERR_UNSUPPORTED,
                          "%s: 'include_prompt' false (pooling without the prompt's tokens) is "
                          "not supported",
                          file);
            goto end;
        }
    }
    v = json_in_get(root, "word_embedding_dimension");
    if (v && !json_in_is(v, JSON_IN_NULL)) {
        if (!json_in_is(v, JSON_IN_NUMBER) || !v->is_int || v->i < 1 || v->i > 65536) {
            rc = sm_error(err, SM_ERR_FORMAT,
                          "%s: 'word_embedding_dimension' must be an integer from 1 to 65536, "
                          "got %s",
                          file, describe(v, buf, sizeof buf));
            goto end;
        }
        out->dim = (int)v->i;
    }
    if (n_true == 0) {
        rc = sm_error(err, SM_ERR_FORMAT,
                      "%s: no pooling mode is true; expected pooling_mode_cls_token or "
                      "pooling_mode_mean_tokens",
                      file);
        goto end;
    }
    if (n_true > 1) {
        sm_error(err, SM_ERR_UNSUPPORTED, "%s: several pooling modes are true (", file);
        size_t used = err ? strlen(err) : 0;
        for (size_t i = 0, k = 0; err && i < N_MODES; i++) {
            const json_in_value *m = json_in_get(root, k_modes[i].key);
            if (!json_in_is(m, JSON_IN_TRUE)) continue;
            used += (size_t)snprintf(err + used, used < SM_ERR_MAX ? SM_ERR_MAX - used : 0, "%s%s",
                                     k++ ? ", " : "", k_modes[i].key);
            if (used >= SM_ERR_MAX) used = SM_ERR_MAX - 1;
        }
        if (err)
            snprintf(err + used, SM_ERR_MAX - used,
                     "): their concatenation is not supported; set exactly one");
        rc = SM_ERR_UNSUPPORTED;
        goto end;
    }
    if (!k_modes[first].supported) {
        rc = sm_error(err, SM_ERR_UNSUPPORTED,
                      "%s: pooling mode '%s' is not supported; supported: "
                      "pooling_mode_cls_token, pooling_mode_mean_tokens",
                      file, k_modes[first].key);
        goto end;
    }
    out->mode = k_modes[first].mode;
end:
    json_in_free(doc);
    return rc;
}

/* Reads dir/name (a config-sized JSON file) into *buf. */
static int read_file(const char *dir, const char *name, char **buf, size_t *len, char *err)
{
    char path[4200];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path)
        return sm_error(err, SM_ERR_INVALID, "model directory path too long");
    return sm_file_read(path, SM_FILE_MAX_CONFIG, buf, len, err);
}

int sm_pooling_read_dir(const char *dir, sm_pooling *out, int *found, char *err)
{
    char path[4200], pool_path[80], file[128];
    char *text = NULL;
    size_t len = 0;
    struct stat sb;
    sm_pooling p;
    int rc, normalize;

    sm_pooling_default(out);
    *found = 0;
    int n = snprintf(path, sizeof path, "%s/modules.json", dir);
    if (n < 0 || (size_t)n >= sizeof path)
        return sm_error(err, SM_ERR_INVALID, "model directory path too long");
    /* absent is the plain Hugging Face layout; anything else there is read
     * (and refused by file_read when it is not a regular file) */
    if (lstat(path, &sb) != 0 && errno == ENOENT) return SM_OK;
    if ((rc = read_file(dir, "modules.json", &text, &len, err))) return rc;
    rc = sm_pooling_parse_modules(text, len, pool_path, sizeof pool_path, &normalize, err);
    free(text);
    text = NULL;
    if (rc) return rc;
    snprintf(file, sizeof file, "%s/config.json", pool_path);
    if ((rc = read_file(dir, file, &text, &len, err))) return rc;
    sm_pooling_default(&p);
    rc = sm_pooling_parse_config(text, len, file, &p, err);
    free(text);
    if (rc) return rc;
    p.set = 1;
    p.normalize = normalize;
    *out = p;
    *found = 1;
    return SM_OK;
}

void sm_pooling_files_of_dir(const char *dir, char *pool_file, size_t cap)
{
    char pool_path[80], err[SM_ERR_MAX];
    char *text = NULL;
    size_t len = 0;
    int normalize;
    if (cap) pool_file[0] = 0;
    if (read_file(dir, "modules.json", &text, &len, err)) return;
    if (sm_pooling_parse_modules(text, len, pool_path, sizeof pool_path, &normalize, err) == SM_OK)
        snprintf(pool_file, cap, "%s/config.json", pool_path);
    free(text);
}

int sm_pooling_from_json(const json_in_value *v, sm_pooling *out, char *err)
{
    static const char key[] = "config.json: 'embedding_pooling'";
    char buf[80];
    sm_pooling p;
    sm_pooling_default(&p);
    if (!json_in_is(v, JSON_IN_OBJECT))
        return sm_error(err, SM_ERR_FORMAT,
                        "%s must be an object such as {\"mode\": \"mean\", \"normalize\": "
                        "true}, got %s",
                        key, describe(v, buf, sizeof buf));
    const json_in_value *mode = json_in_get(v, "mode"), *norm = json_in_get(v, "normalize");
    if (!json_in_is(mode, JSON_IN_STRING))
        return sm_error(err, SM_ERR_FORMAT, "%s: 'mode' must be \"mean\" or \"cls\", got %s", key,
                        mode ? describe(mode, buf, sizeof buf) : "nothing");
    if (!strcmp(mode->str, "mean")) p.mode = SM_POOL_MEAN;
    else if (!strcmp(mode->str, "cls")) p.mode = SM_POOL_CLS;
    else
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "%s: mode %s is not supported; expected \"mean\" or \"cls\"", key,
                        describe(mode, buf, sizeof buf));
    if (norm && !json_in_is(norm, JSON_IN_NULL)) {
        if (!json_in_is(norm, JSON_IN_TRUE) && !json_in_is(norm, JSON_IN_FALSE))
            return sm_error(err, SM_ERR_FORMAT, "%s: 'normalize' must be true or false, got %s",
                            key, describe(norm, buf, sizeof buf));
        p.normalize = json_in_is(norm, JSON_IN_TRUE);
    }
    p.set = 1;
    *out = p;
    return SM_OK;
}

int sm_pooling_files(const sm_pooling *p, int hidden, char **modules_json, char **pooling_json,
                     char *err)
{
    static const char modules_fmt[] =
        "[\n"
        "  {\n    \"idx\": 0,\n    \"name\": \"0\",\n    \"path\": \"\",\n"
        "    \"type\": \"%s\"\n  },\n"
        "  {\n    \"idx\": 1,\n    \"name\": \"1\",\n    \"path\": \"" SM_POOLING_DIR "\",\n"
        "    \"type\": \"%s\"\n  }%s\n"
        "]\n";
    static const char normalize_entry[] =
        ",\n  {\n    \"idx\": 2,\n    \"name\": \"2\",\n    \"path\": \"" SM_NORMALIZE_DIR "\",\n"
        "    \"type\": \"sentence_transformers.models.Normalize\"\n  }";
    static const char pooling_fmt[] = "{\n"
                                      "  \"word_embedding_dimension\": %d,\n"
                                      "  \"pooling_mode_cls_token\": %s,\n"
                                      "  \"pooling_mode_mean_tokens\": %s,\n"
                                      "  \"pooling_mode_max_tokens\": false,\n"
                                      "  \"pooling_mode_mean_sqrt_len_tokens\": false,\n"
                                      "  \"pooling_mode_weightedmean_tokens\": false,\n"
                                      "  \"pooling_mode_lasttoken\": false,\n"
                                      "  \"include_prompt\": true\n"
                                      "}\n";
    *modules_json = *pooling_json = NULL;
    size_t ml = sizeof modules_fmt + sizeof k_transformer + sizeof k_pooling +
                sizeof normalize_entry,
           pl = sizeof pooling_fmt + 32;
    char *m = malloc(ml), *q = malloc(pl);
    if (!m || !q) {
        free(m);
        free(q);
        return sm_error(err, SM_ERR_NOMEM, "out of memory writing modules.json");
    }
    snprintf(m, ml, modules_fmt, k_transformer, k_pooling, p->normalize ? normalize_entry : "");
    snprintf(q, pl, pooling_fmt, hidden, p->mode == SM_POOL_CLS ? "true" : "false",
             p->mode == SM_POOL_MEAN ? "true" : "false");
    *modules_json = m;
    *pooling_json = q;
    return SM_OK;
}

void sm_pool_sequence(const sm_pooling *p, const float *hidden, int length, int C, float *out)
{
    if (length < 1) length = 1;
    if (p->mode == SM_POOL_CLS) {
        memcpy(out, hidden, (size_t)C * sizeof *out);
    } else {
        /* sum(h * mask) / sum(mask), summed in double: the order of a float
         * sum would be ours, not torch's; a double sum is closer to both */
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int t = 0; t < length; t++) s += hidden[(size_t)t * C + c];
            out[c] = (float)(s / length);
        }
    }
    if (p->normalize) {
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)out[c] * out[c];
        double norm = sqrt(ss);
        if (norm < 1e-12) norm = 1e-12;
        for (int c = 0; c < C; c++) out[c] = (float)(out[c] / norm);
    }
}
