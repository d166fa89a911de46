/* json_in.c: strict parsing of outside JSON (see json_in.h for why): a
 * validating pass that allocates nothing, cJSON to build the tree, and a copy
 * into one block with sorted keys. Owns the json_in_doc block.
 */
#include "format/json_in.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

static void *(*g_malloc)(size_t) = malloc;
static void (*g_free)(void *) = free;

void json_in_set_alloc_funcs(void *(*m)(size_t), void (*f)(void *))
{
    g_malloc = m ? m : malloc;
    g_free = f ? f : free;
}

struct json_in_doc {
    json_in_value root;
    /* then the block: values, members, key index, strings */
};

/* ---- the validating pass ------------------------------------------------- */

typedef struct scan {
    const unsigned char *s;
    size_t len, pos;
    const char *why; /* set on failure; pos is the byte at fault */
} scan;

static int fail(scan *c, const char *why)
{
    c->why = why;
    return 0;
}

static void skip_ws(scan *c)
{
    while (c->pos < c->len) {
        unsigned char ch = c->s[c->pos];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
        c->pos++;
    }
}

static int hex4(scan *c, unsigned *out)
{
    unsigned v = 0;
    if (c->len - c->pos < 4) return fail(c, "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        unsigned ch = c->s[c->pos + i], d;
        if (ch >= '0' && ch <= '9') d = ch - '0';
        else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
        else return fail(c, "\\u must be followed by four hex digits");
        v = v << 4 | d;
    }
    c->pos += 4;
    *out = v;
    return 1;
}

/* One UTF-8 sequence starting at c->pos (a byte >= 0x80), strictly. */
static int utf8_seq(scan *c)
{
    const unsigned char *p = c->s + c->pos;
    size_t left = c->len - c->pos;
    unsigned b0 = p[0], n, lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 1;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 2;
        if (b0 == 0xE0) lo = 0xA0; /* no overlong */
        if (b0 == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 3;
        if (b0 == 0xF0) lo = 0x90; /* no overlong */
        if (b0 == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    } else return fail(c, "invalid UTF-8 in a string");
    if (left < n + 1) return fail(c, "invalid UTF-8 in a string");
    for (unsigned i = 1; i <= n; i++) {
        unsigned b = p[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF))
            return fail(c, "invalid UTF-8 in a string");
    }
    c->pos += n + 1;
    return 1;
}

static int scan_string(scan *c)
{
    c->pos++; /* the opening quote */
    for (;;) {
        if (c->pos >= c->len) return fail(c, "unterminated string");
        unsigned ch = c->s[c->pos];
        if (ch == '"') {
            c->pos++;
            return 1;
        }
        if (ch < 0x20) return fail(c, "control character in a string (write it as an escape)");
        if (ch >= 0x80) {
            if (!utf8_seq(c)) return 0;
            continue;
        }
        if (ch != '\\') {
            c->pos++;
            continue;
        }
        size_t at = c->pos;
        if (++c->pos >= c->len) return fail(c, "unterminated string");
        ch = c->s[c->pos++];
        if (strchr("\"\\/bfnrt", (int)ch) && ch) continue;
        if (ch != 'u') {
            c->pos = at;
            return fail(c, "invalid escape in a string");
        }
        unsigned u, u2;
        if (!hex4(c, &u)) return 0;
        if (u == 0) {
            c->pos = at;
            return fail(c, "\\u0000 is not allowed in a string");
        }
        if (u >= 0xDC00 && u <= 0xDFFF) {
            c->pos = at;
            return fail(c, "\\u escape of a lone low surrogate");
        }
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (c->len - c->pos < 6 || c->s[c->pos] != '\\' || c->s[c->pos + 1] != 'u') {
                c->pos = at;
                return fail(c, "\\u escape of a high surrogate without its low half");
            }
            c->pos += 2;
            if (!hex4(c, &u2)) return 0;
            if (u2 < 0xDC00 || u2 > 0xDFFF) {
                c->pos = at;
                return fail(c, "\\u escape of a high surrogate without its low half");
            }
        }
    }
}

static int is_digit(unsigned ch)
{
    return ch >= '0' && ch <= '9';
}

/* Reads the integer literal s[0..n) (known well formed) into *out; 0 when it
 * does not fit int64. */
static int int_literal(const unsigned char *s, size_t n, int64_t *out)
{
    int neg = s[0] == '-';
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (size_t i = (size_t)neg; i < n; i++) {
        unsigned d = s[i] - '0';
        if (v > (lim - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

static int scan_number(scan *c)
{
    size_t start = c->pos, p = c->pos;
    const unsigned char *s = c->s;
    int is_int = 1;
    if (p < c->len && s[p] == '-') p++;
    if (p >= c->len || !is_digit(s[p])) {
        c->pos = start;
        return fail(c, "invalid number");
    }
    if (s[p] == '0') {
        p++;
        if (p < c->len && is_digit(s[p])) {
            c->pos = start;
            return fail(c, "number with a leading zero");
        }
    } else
        while (p < c->len && is_digit(s[p])) p++;
    if (p < c->len && s[p] == '.') {
        is_int = 0;
        p++;
        if (p >= c->len || !is_digit(s[p])) {
            c->pos = start;
            return fail(c, "invalid number: no digit after '.'");
        }
        while (p < c->len && is_digit(s[p])) p++;
    }
    if (p < c->len && (s[p] == 'e' || s[p] == 'E')) {
        is_int = 0;
        p++;
        if (p < c->len && (s[p] == '+' || s[p] == '-')) p++;
        if (p >= c->len || !is_digit(s[p])) {
            c->pos = start;
            return fail(c, "invalid number: no digit in the exponent");
        }
        while (p < c->len && is_digit(s[p])) p++;
    }
    c->pos = start;
    if (p - start > 63) return fail(c, "number longer than 63 characters");
    int64_t v;
    if (is_int && !int_literal(s + start, p - start, &v))
        return fail(c, "integer out of the 64-bit range");
    c->pos = p;
    return 1;
}

static int scan_literal(scan *c, const char *word)
{
    size_t n = strlen(word);
    if (c->len - c->pos < n || memcmp(c->s + c->pos, word, n) != 0)
        return fail(c, "unexpected character; expected a value");
    c->pos += n;
    return 1;
}

static int scan_value(scan *c, int depth);

static int scan_container(scan *c, int depth, int is_obj)
{
    if (depth >= JSON_IN_MAX_DEPTH) return fail(c, "nested deeper than 64 levels");
    char close = is_obj ? '}' : ']';
    c->pos++;
    skip_ws(c);
    if (c->pos < c->len && c->s[c->pos] == (unsigned char)close) {
        c->pos++;
        return 1;
    }
    for (;;) {
        if (is_obj) {
            if (c->pos >= c->len || c->s[c->pos] != '"')
                return fail(c,
                            c->pos >= c->len ? "unexpected end of input" : "expected a string key");
            if (!scan_string(c)) return 0;
            skip_ws(c);
            if (c->pos >= c->len || c->s[c->pos] != ':') return fail(c, "expected ':' after a key");
            c->pos++;
            skip_ws(c);
        }
        if (!scan_value(c, depth + 1)) return 0;
        skip_ws(c);
        if (c->pos >= c->len) return fail(c, "unexpected end of input");
        if (c->s[c->pos] == (unsigned char)close) {
            c->pos++;
            return 1;
        }
        if (c->s[c->pos] != ',')
            return fail(c, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        c->pos++;
        skip_ws(c);
    }
}

static int scan_value(scan *c, int depth)
{
    if (c->pos >= c->len) return fail(c, "unexpected end of input");
    switch (c->s[c->pos]) {
    case '{': return scan_container(c, depth, 1);
    case '[': return scan_container(c, depth, 0);
    case '"': return scan_string(c);
    case 't': return scan_literal(c, "true");
    case 'f': return scan_literal(c, "false");
    case 'n': return scan_literal(c, "null");
    default:
        if (c->s[c->pos] == '-' || is_digit(c->s[c->pos])) return scan_number(c);
        return fail(c, "unexpected character; expected a value");
    }
}

static int scan_document(scan *c)
{
    skip_ws(c);
    if (!scan_value(c, 0)) return 0;
    skip_ws(c);
    if (c->pos != c->len) return fail(c, "unexpected content after the JSON value");
    return 1;
}

int json_in_utf8_valid(const char *s, size_t n)
{
    scan c = {(const unsigned char *)s, n, 0, NULL};
    while (c.pos < n) {
        if (c.s[c.pos] == 0) return 0;
        if (c.s[c.pos] < 0x80) c.pos++;
        else if (!utf8_seq(&c)) return 0;
    }
    return 1;
}

/* ---- the copy out of cJSON ----------------------------------------------- */

typedef struct copy {
    char *structs; /* bump pointer: values, members, key index */
    char *strings; /* bump pointer: keys and strings */
    const unsigned char *text;
    size_t len, pos; /* number cursor: numbers meet in document order */
} copy;

/* Bytes the copy needs for the values and strings under v. */
static void measure(const cJSON *v, size_t *structs, size_t *strings)
{
    size_t n = 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        for (const cJSON *k = v->child; k; k = k->next) {
            n++;
            if (cJSON_IsObject(v)) *strings += strlen(k->string) + 1;
            measure(k, structs, strings);
        }
        *structs += cJSON_IsArray(v) ? n * sizeof(json_in_value)
                                     : n * (sizeof(json_in_member) + sizeof(json_in_member *));
    } else if (cJSON_IsString(v)) *strings += strlen(v->valuestring) + 1;
}

static const char *copy_str(copy *c, const char *s)
{
    size_t n = strlen(s) + 1;
    char *out = c->strings;
    memcpy(out, s, n);
    c->strings += n;
    return out;
}

/* The next number literal in the text, from the cursor (the text is valid:
 * outside strings, '-' and digits begin only numbers). */
static void next_number(copy *c, const unsigned char **start, size_t *n)
{
    size_t p = c->pos;
    for (;;) {
        unsigned ch = c->text[p];
        if (ch == '"') {
            for (p++; c->text[p] != '"'; p++)
                if (c->text[p] == '\\') p++;
            p++;
        } else if (ch == '-' || is_digit(ch)) break;
        else p++;
    }
    size_t q = p;
    while (q < c->len && strchr("0123456789+-.eE", c->text[q]) && c->text[q]) q++;
    *start = c->text + p;
    *n = q - p;
    c->pos = q;
}

static int cmp_member(const void *a, const void *b)
{
    return strcmp((*(json_in_member *const *)a)->key, (*(json_in_member *const *)b)->key);
}

/* Copies v into out; SM_OK or SM_ERR_FORMAT with e->reason. */
static int copy_value(copy *c, const cJSON *v, json_in_value *out, json_in_error *e)
{
    memset(out, 0, sizeof *out);
    if (cJSON_IsNull(v)) {
        out->type = JSON_IN_NULL;
    } else if (cJSON_IsFalse(v)) {
        out->type = JSON_IN_FALSE;
    } else if (cJSON_IsTrue(v)) {
        out->type = JSON_IN_TRUE;
    } else if (cJSON_IsNumber(v)) {
        const unsigned char *s;
        size_t n;
        out->type = JSON_IN_NUMBER;
        next_number(c, &s, &n);
        if (!memchr(s, '.', n) && !memchr(s, 'e', n) && !memchr(s, 'E', n)) {
            out->is_int = int_literal(s, n, &out->i); /* checked: fits */
            out->d = (double)out->i;
        } else {
            out->d = v->valuedouble;
            if (!isfinite(out->d)) {
                snprintf(e->reason, sizeof e->reason, "number out of the range of a double");
                return SM_ERR_FORMAT;
            }
        }
    } else if (cJSON_IsString(v)) {
        out->type = JSON_IN_STRING;
        out->n = strlen(v->valuestring);
        out->str = copy_str(c, v->valuestring);
    } else if (cJSON_IsArray(v)) {
        size_t n = 0;
        for (const cJSON *k = v->child; k; k = k->next) n++;
        out->type = JSON_IN_ARRAY;
        out->n = n;
        out->items = (json_in_value *)(void *)c->structs;
        c->structs += n * sizeof *out->items;
        size_t i = 0;
        for (const cJSON *k = v->child; k; k = k->next, i++) {
            int rc = copy_value(c, k, &out->items[i], e);
            if (rc) return rc;
        }
    } else if (cJSON_IsObject(v)) {
        size_t n = 0;
        for (const cJSON *k = v->child; k; k = k->next) n++;
        out->type = JSON_IN_OBJECT;
        out->n = n;
        out->members = (json_in_member *)(void *)c->structs;
        c->structs += n * sizeof *out->members;
        out->by_key = (json_in_member **)(void *)c->structs;
        c->structs += n * sizeof *out->by_key;
        size_t i = 0;
        for (const cJSON *k = v->child; k; k = k->next, i++) {
            out->members[i].key = copy_str(c, k->string);
            out->by_key[i] = &out->members[i];
            int rc = copy_value(c, k, &out->members[i].value, e);
            if (rc) return rc;
        }
        qsort(out->by_key, n, sizeof *out->by_key, cmp_member);
        for (i = 1; i < n; i++)
            if (strcmp(out->by_key[i - 1]->key, out->by_key[i]->key) == 0) {
                /* named only when short printable ASCII: the rest of
                 * the input is never quoted, nor a key's odd bytes */
                const char *key = out->by_key[i]->key;
                size_t kl = strlen(key), j;
                for (j = 0; j < kl && key[j] >= 0x20 && key[j] < 0x7f; j++) {}
                if (j == kl && kl <= 60)
                    snprintf(e->reason, sizeof e->reason, "duplicate key '%s'", key);
                else
                    snprintf(e->reason, sizeof e->reason,
                             "duplicate key (not shown: %zu "
                             "bytes, not all printable ASCII or too long)",
                             kl);
                return SM_ERR_FORMAT;
            }
    } else {
        snprintf(e->reason, sizeof e->reason, "unexpected value");
        return SM_ERR_FORMAT;
    }
    return SM_OK;
}

/* ---- the entry points ---------------------------------------------------- */

static void line_column(const unsigned char *s, size_t pos, json_in_error *e)
{
    e->line = 1;
    e->column = 1;
    for (size_t i = 0; i < pos; i++) {
        if (s[i] == '\n') {
            e->line++;
            e->column = 1;
        } else if ((s[i] & 0xC0) != 0x80) {
            e->column++;
        }
    }
}

int json_in_parse(const char *text, size_t len, json_in_doc **out, json_in_error *e)
{
    json_in_doc *doc = NULL;
    cJSON *tree = NULL;
    memset(e, 0, sizeof *e);
    *out = NULL;
    if (!text) {
        e->code = SM_ERR_FORMAT;
        snprintf(e->reason, sizeof e->reason, "no text");
        return e->code;
    }
    scan sc = {(const unsigned char *)text, len, 0, NULL};
    if (!scan_document(&sc)) {
        e->code = SM_ERR_FORMAT;
        line_column(sc.s, sc.pos, e);
        snprintf(e->reason, sizeof e->reason, "%s", sc.why);
        return e->code;
    }
    /* Valid JSON: from here cJSON fails only when memory runs out. */
    const char *end = NULL;
    tree = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!tree) {
        e->code = SM_ERR_NOMEM;
        snprintf(e->reason, sizeof e->reason, "out of memory");
        return e->code;
    }
    size_t structs = 0, strings = 0;
    measure(tree, &structs, &strings);
    if (!(doc = g_malloc(sizeof *doc + structs + strings))) {
        cJSON_Delete(tree);
        e->code = SM_ERR_NOMEM;
        snprintf(e->reason, sizeof e->reason, "out of memory");
        return e->code;
    }
    copy c = {(char *)(doc + 1), (char *)(doc + 1) + structs, (const unsigned char *)text, len, 0};
    int rc = copy_value(&c, tree, &doc->root, e);
    cJSON_Delete(tree);
    if (rc) {
        g_free(doc);
        e->code = rc;
        e->line = e->column = 0; /* the reason names the key */
        return rc;
    }
    *out = doc;
    return SM_OK;
}

const json_in_value *json_in_root(const json_in_doc *doc)
{
    return doc ? &doc->root : NULL;
}

void json_in_free(json_in_doc *doc)
{
    if (doc) g_free(doc);
}

const json_in_value *json_in_get(const json_in_value *obj, const char *key)
{
    if (!json_in_is(obj, JSON_IN_OBJECT) || !key) return NULL;
    size_t lo = 0, hi = obj->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(obj->by_key[mid]->key, key);
        if (c == 0) return &obj->by_key[mid]->value;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* The shortest %g that reads back as d, with ".0" when it looks integral
 * (768.0 stays 768.0, as jansson writes it). */
static void render_double(double d, char *buf, size_t cap)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* the host's locale may write a decimal comma */
    for (char *q = buf; *q; q++)
        if (*q == ',') *q = '.';
    if (!strpbrk(buf, ".eEn") && strlen(buf) + 3 <= cap) strcat(buf, ".0");
}

const char *json_in_describe(const json_in_value *v, char *buf, size_t cap)
{
    if (!v || !cap) return "nothing";
    switch (v->type) {
    case JSON_IN_NULL: return "null";
    case JSON_IN_FALSE: return "false";
    case JSON_IN_TRUE: return "true";
    case JSON_IN_ARRAY: return "an array";
    case JSON_IN_OBJECT: return "an object";
    case JSON_IN_NUMBER:
        if (v->is_int) snprintf(buf, cap, "%lld", (long long)v->i);
        else render_double(v->d, buf, cap);
        return buf;
    case JSON_IN_STRING:
        if (v->n + 3 <= cap || cap < 8) snprintf(buf, cap, "\"%s\"", v->str);
        else {
            size_t k = cap - 6; /* cut on a character boundary */
            while (k > 0 && ((unsigned char)v->str[k] & 0xC0) == 0x80) k--;
            snprintf(buf, cap, "\"%.*s...\"", (int)k, v->str);
        }
        return buf;
    }
    return "a value";
}
