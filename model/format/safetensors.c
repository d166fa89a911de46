/* safetensors.c: reads, validates and writes the safetensors checkpoint format.
 *
 * Owns the parsed tensor table (names and st_tensor array) of a safetensors
 * struct and, for files, the read-only mapping. Tensor data is never copied on
 * open: st_tensor.data points into the file or the caller's buffer, which may
 * be unaligned, so all element reads go through memcpy. The header JSON is
 * parsed with json_in (strict, exact integers, safe on a failed allocation)
 * and produced with jansson. Byte order: the format is little-endian
 * and so are the hosts we build for (x86_64, aarch64); F32/F64 data are copied
 * as host floats, so a big-endian host is not supported.
 */
#include "format/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"
#include "format/file_read.h"
#include "format/json_in.h"

/* A header larger than this is treated as corrupt (real ones are < 1 MB). */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

static const struct {
    const char *name;
    size_t size;
} dtype_info[] = {
    [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2},
    [ST_F64] = {"F64", 8}, [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4},
    [ST_I8] = {"I8", 1},   [ST_U8] = {"U8", 1},   [ST_BOOL] = {"BOOL", 1},
};
#define N_DTYPES ((int)(sizeof dtype_info / sizeof dtype_info[0]))

const char *st_dtype_name(st_dtype dt)
{
    if ((int)dt < 0 || (int)dt >= N_DTYPES) return "?";
    return dtype_info[dt].name;
}

size_t st_dtype_size(st_dtype dt)
{
    if ((int)dt < 0 || (int)dt >= N_DTYPES) return 0;
    return dtype_info[dt].size;
}

static int dtype_from_name(const char *s, st_dtype *out)
{
    for (int i = 0; i < N_DTYPES; i++) {
        if (strcmp(s, dtype_info[i].name) == 0) {
            *out = (st_dtype)i;
            return 1;
        }
    }
    return 0;
}

/* ---- half-precision conversions ---------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in F32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) /* inf, or NaN keeping its payload (made quiet) */
        return bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0));
    return bits_f32(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

uint16_t st_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);

    u &= 0x7fffffffu;
    if (u > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
        return sign | 0x7e00 | (uint16_t)((u >> 13) & 0x3ff);
    if (u >= 0x477ff000u) /* >= 65520 rounds to infinity (and inf itself) */
        return sign | 0x7c00;
    if (u < 0x38800000u) { /* below the smallest normal half: subnormal/0 */
        /* Adding 0.5f puts the half subnormal's bits at the bottom of the
         * mantissa, rounded to nearest even by the FPU. */
        float v = bits_f32(u) + 0.5f;
        return sign | (uint16_t)(f32_bits(v) - 0x3f000000u);
    }
    uint32_t odd = (u >> 13) & 1;
    u += 0xc8000fffu + odd; /* rebias the exponent (15 - 127) and round */
    return sign | (uint16_t)(u >> 13);
}

float st_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t st_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN (quiet) */
        return (uint16_t)((u >> 16) | 0x0040);
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* ---- reading ------------------------------------------------------------- */

static uint64_t load_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Formats a shape as "[3, 4]" into buf (cap bytes). */
static const char *shape_str(const int64_t *shape, int ndim, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* Reads a JSON integer (written without fraction or exponent, kept exactly)
 * that is >= 0. */
static int json_nonneg_int(const json_in_value *v, int64_t *out)
{
    if (!json_in_is(v, JSON_IN_NUMBER) || !v->is_int || v->i < 0) return 0;
    *out = v->i;
    return 1;
}

static int parse_shape(const char *name, const json_in_value *js, st_tensor *t, char *err)
{
    if (!json_in_is(js, JSON_IN_ARRAY))
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: tensor '%s': 'shape' must be an array of "
                        "non-negative integers",
                        name);
    size_t nd = js->n;
    if (nd > ST_MAX_DIMS)
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: tensor '%s': shape has %zu dimensions, "
                        "at most %d are supported",
                        name, nd, ST_MAX_DIMS);
    int64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        int64_t d;
        if (!json_nonneg_int(&js->items[i], &d))
            return sm_error(err, SM_ERR_FORMAT,
                            "safetensors: tensor '%s': shape[%zu] must be a "
                            "non-negative integer",
                            name, i);
        if (__builtin_mul_overflow(numel, d, &numel))
            return sm_error(err, SM_ERR_FORMAT,
                            "safetensors: tensor '%s': shape element count "
                            "overflows",
                            name);
        t->shape[i] = d;
    }
    t->ndim = (int)nd;
    t->numel = numel;
    return SM_OK;
}

static int parse_offsets(const char *name, const json_in_value *jo, uint64_t *begin, uint64_t *end,
                         char *err)
{
    int64_t b, e;
    if (!json_in_is(jo, JSON_IN_ARRAY) || jo->n != 2 || !json_nonneg_int(&jo->items[0], &b) ||
        !json_nonneg_int(&jo->items[1], &e))
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: tensor '%s': 'data_offsets' must be two "
                        "non-negative integers [begin, end]",
                        name);
    if (b > e)
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: tensor '%s': data_offsets [%lld, %lld] "
                        "have begin > end",
                        name, (long long)b, (long long)e);
    *begin = (uint64_t)b;
    *end = (uint64_t)e;
    return SM_OK;
}

/* Validates one header entry and fills t (name still unset). */
static int parse_tensor(const char *name, const json_in_value *jt, const uint8_t *data,
                        uint64_t data_len, st_tensor *t, char *err)
{
    if (!json_in_is(jt, JSON_IN_OBJECT))
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: tensor '%s': entry must be an object "
                        "with dtype, shape and data_offsets",
                        name);
    const json_in_value *jd = json_in_get(jt, "dtype");
    if (!jd) return sm_error(err, SM_ERR_FORMAT, "safetensors: tensor '%s': missing 'dtype'", name);
    if (!json_in_is(jd, JSON_IN_STRING))
        return sm_error(err, SM_ERR_FORMAT, "safetensors: tensor '%s': 'dtype' must be a string",
                        name);
    if (!dtype_from_name(jd->str, &t->dtype))
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: tensor '%s': unknown dtype '%s'; expected "
                        "F32, F16, BF16, F64, I64, I32, I8, U8 or BOOL",
                        name, jd->str);
    const json_in_value *js = json_in_get(jt, "shape");
    if (!js) return sm_error(err, SM_ERR_FORMAT, "safetensors: tensor '%s': missing 'shape'", name);
    int rc = parse_shape(name, js, t, err);
    if (rc) return rc;
    const json_in_value *jo = json_in_get(jt, "data_offsets");
    if (!jo)
        return sm_error(err, SM_ERR_FORMAT, "safetensors: tensor '%s': missing 'data_offsets'",
                        name);
    uint64_t begin = 0, end = 0;
    if ((rc = parse_offsets(name, jo, &begin, &end, err))) return rc;
    if (end > data_len)
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: tensor '%s': data_offsets [%llu, %llu] "
                        "end beyond the data section (%llu bytes); file "
                        "truncated?",
                        name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)data_len);
    uint64_t need;
    char sb[200];
    if (__builtin_mul_overflow((uint64_t)t->numel, (uint64_t)st_dtype_size(t->dtype), &need))
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: tensor '%s': shape %s %s: byte size "
                        "overflows",
                        name, shape_str(t->shape, t->ndim, sb, sizeof sb), st_dtype_name(t->dtype));
    if (need != end - begin)
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: tensor '%s': shape %s %s needs %llu "
                        "bytes, data_offsets give %llu",
                        name, shape_str(t->shape, t->ndim, sb, sizeof sb), st_dtype_name(t->dtype),
                        (unsigned long long)need, (unsigned long long)(end - begin));
    t->data = data + begin;
    t->nbytes = (size_t)need;
    return SM_OK;
}

static int check_metadata(const json_in_value *jm, char *err)
{
    if (!json_in_is(jm, JSON_IN_OBJECT))
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: '__metadata__' must be an object of "
                        "strings");
    for (size_t i = 0; i < jm->n; i++) {
        if (!json_in_is(&jm->members[i].value, JSON_IN_STRING))
            return sm_error(err, SM_ERR_FORMAT,
                            "safetensors: '__metadata__' value for '%s' must "
                            "be a string",
                            jm->members[i].key);
    }
    return SM_OK;
}

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_by_offset(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a;
    const st_tensor *y = *(const st_tensor *const *)b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Rejects two non-empty tensors whose byte ranges intersect. */
static int check_overlap(const safetensors *st, const uint8_t *data, char *err)
{
    int rc = SM_OK;
    int n = st->n_tensors;
    if (n < 2) return SM_OK;
    const st_tensor **by_off = malloc((size_t)n * sizeof *by_off);
    if (!by_off) return sm_error(err, SM_ERR_NOMEM, "safetensors: out of memory");
    for (int i = 0; i < n; i++) by_off[i] = &st->tensors[i];
    qsort(by_off, (size_t)n, sizeof *by_off, cmp_by_offset);
    const st_tensor *last = NULL; /* the tensor reaching furthest so far */
    for (int i = 0; i < n; i++) {
        const st_tensor *t = by_off[i];
        if (t->nbytes == 0) continue;
        if (last && t->data < last->data + last->nbytes) {
            rc = sm_error(err, SM_ERR_FORMAT,
                          "safetensors: tensors '%s' [%td, %td) and '%s' "
                          "[%td, %td) overlap",
                          last->name, last->data - data, last->data + last->nbytes - data, t->name,
                          t->data - data, t->data + t->nbytes - data);
            goto fail;
        }
        if (!last || t->data + t->nbytes > last->data + last->nbytes) last = t;
    }
fail:
    free(by_off);
    return rc;
}

/* Parses the header JSON and fills st->tensors (st->base/size already set). */
static int parse_header(safetensors *st, const char *hdr, size_t hdr_len, const uint8_t *data,
                        uint64_t data_len, char *err)
{
    int rc = SM_OK;
    json_in_error jerr;
    json_in_doc *doc = NULL;
    if ((rc = json_in_parse(hdr, hdr_len, &doc, &jerr))) {
        if (rc == SM_ERR_NOMEM)
            rc = sm_error(err, SM_ERR_NOMEM,
                          "safetensors: out of memory "
                          "parsing the header");
        else if (jerr.line)
            rc = sm_error(err, SM_ERR_FORMAT,
                          "safetensors: header is not valid JSON (line %d, "
                          "column %d): %s",
                          jerr.line, jerr.column, jerr.reason);
        else
            rc = sm_error(err, SM_ERR_FORMAT, "safetensors: header is not valid JSON: %s",
                          jerr.reason);
        goto fail;
    }
    const json_in_value *root = json_in_root(doc);
    if (!json_in_is(root, JSON_IN_OBJECT)) {
        rc = sm_error(err, SM_ERR_FORMAT, "safetensors: header must be a JSON object of tensors");
        goto fail;
    }
    size_t cap = root->n;
    st->tensors = calloc(cap ? cap : 1, sizeof *st->tensors);
    if (!st->tensors) {
        rc = sm_error(err, SM_ERR_NOMEM, "safetensors: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < root->n; i++) {
        const char *key = root->members[i].key;
        const json_in_value *val = &root->members[i].value;
        if (strcmp(key, "__metadata__") == 0) {
            if ((rc = check_metadata(val, err))) goto fail;
            continue;
        }
        st_tensor *t = &st->tensors[st->n_tensors];
        if ((rc = parse_tensor(key, val, data, data_len, t, err))) goto fail;
        if (!(t->name = strdup(key))) {
            rc = sm_error(err, SM_ERR_NOMEM, "safetensors: out of memory");
            goto fail;
        }
        st->n_tensors++;
    }
    qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_by_name);
    rc = check_overlap(st, data, err);
fail:
    json_in_free(doc);
    return rc;
}

int safetensors_open_buffer(const void *buf, size_t len, safetensors *st, char *err)
{
    int rc;
    memset(st, 0, sizeof *st);
    if (!buf || len < 8)
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: %zu bytes is too short for a file (needs "
                        "an 8-byte header length)",
                        len);
    const uint8_t *p = buf;
    uint64_t hlen = load_u64le(p);
    if (hlen > ST_MAX_HEADER)
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: header length %llu is absurd (limit %llu "
                        "bytes); not a safetensors file?",
                        (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    if (hlen > len - 8)
        return sm_error(err, SM_ERR_FORMAT,
                        "safetensors: header length %llu runs past the end of "
                        "the %zu-byte file; truncated?",
                        (unsigned long long)hlen, len);
    st->base = p;
    st->size = len;
    rc = parse_header(st, (const char *)p + 8, (size_t)hlen, p + 8 + hlen, len - 8 - hlen, err);
    if (rc) safetensors_close(st);
    return rc;
}

int safetensors_open_file(const char *path, safetensors *st, char *err)
{
    int rc;
    char sub[SM_ERR_MAX];
    void *map = NULL;
    uint64_t size64 = 0;
    size_t size = 0;
    int fd;

    memset(st, 0, sizeof *st);
    if ((rc = sm_file_open(path, SM_FILE_MAX_WEIGHTS, &fd, &size64, sub)))
        return sm_error(err, rc, "safetensors: %s", sub);
    size = (size_t)size64;
    if (size < 8) {
        rc = sm_error(err, SM_ERR_FORMAT,
                      "safetensors: '%s' is %zu bytes, too short for a "
                      "safetensors file",
                      path, size);
        goto fail;
    }
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        map = NULL;
        rc = sm_error(err, SM_ERR_IO, "safetensors: cannot mmap '%s': %s", path, strerror(errno));
        goto fail;
    }
    if ((rc = safetensors_open_buffer(map, size, st, sub))) {
        rc = sm_error(err, rc, "%s (in '%s')", sub, path);
        goto fail;
    }
    st->mapping = map;
    close(fd);
    return SM_OK;
fail:
    if (map) munmap(map, size);
    close(fd);
    return rc;
}

void safetensors_close(safetensors *st)
{
    if (!st) return;
    for (int i = 0; st->tensors && i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    if (st->mapping) munmap(st->mapping, st->size);
    memset(st, 0, sizeof *st);
}

static int cmp_find(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const st_tensor *)elem)->name);
}

const st_tensor *safetensors_find(const safetensors *st, const char *name)
{
    if (!st || !st->tensors || !name) return NULL;
    return bsearch(name, st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_find);
}

int st_tensor_to_f32(const st_tensor *t, float *dst, char *err)
{
    const uint8_t *p = t->data;
    size_t n = (size_t)t->numel;

    if (n == 0 && t->dtype <= ST_F64) return SM_OK;
    switch (t->dtype) {
    case ST_F32: memcpy(dst, p, n * 4); return SM_OK;
    case ST_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = st_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return SM_OK;
    case ST_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = st_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return SM_OK;
    case ST_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        }
        return SM_OK;
    default:
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "safetensors: tensor '%s' is %s; only F32, F16, BF16 "
                        "and F64 convert to F32",
                        t->name, st_dtype_name(t->dtype));
    }
}

/* ---- writing ------------------------------------------------------------- */

typedef struct write_item {
    const st_write_entry *e;
    size_t numel;
    size_t offset; /* in the data section */
} write_item;

static int cmp_item(const void *a, const void *b)
{
    return strcmp(((const write_item *)a)->e->name, ((const write_item *)b)->e->name);
}

/* Checks one entry and returns its element count in *numel. */
static int check_entry(const st_write_entry *e, int i, size_t *numel, char *err)
{
    if (!e->name || !e->name[0])
        return sm_error(err, SM_ERR_INVALID, "safetensors_serialize: entry %d has no name", i);
    if (strcmp(e->name, "__metadata__") == 0)
        return sm_error(err, SM_ERR_INVALID,
                        "safetensors_serialize: '__metadata__' is reserved, "
                        "not a tensor name");
    if (e->ndim < 0 || e->ndim > ST_MAX_DIMS)
        return sm_error(err, SM_ERR_INVALID,
                        "safetensors_serialize: tensor '%s': ndim %d, expected "
                        "0..%d",
                        e->name, e->ndim, ST_MAX_DIMS);
    int64_t m = 1;
    int overflow = 0;
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] < 0)
            return sm_error(err, SM_ERR_INVALID,
                            "safetensors_serialize: tensor '%s': shape[%d] is "
                            "%lld, expected >= 0",
                            e->name, d, (long long)e->shape[d]);
        overflow |= __builtin_mul_overflow(m, e->shape[d], &m);
    }
    if (overflow || m > INT64_MAX / 16)
        return sm_error(err, SM_ERR_INVALID,
                        "safetensors_serialize: tensor '%s': too many "
                        "elements",
                        e->name);
    if (m > 0 && !e->data)
        return sm_error(err, SM_ERR_INVALID, "safetensors_serialize: tensor '%s': data is NULL",
                        e->name);
    *numel = (size_t)m;
    return SM_OK;
}

/* Adds {"dtype", "shape", "data_offsets"} for e to root; -1 on failure. */
static int add_header_entry(json_t *root, const st_write_entry *e, st_dtype dtype, size_t begin,
                            size_t end)
{
    json_t *shape = json_array();
    json_t *off = json_pack("[II]", (json_int_t)begin, (json_int_t)end);
    json_t *jt = json_object();
    int bad = !shape || !off || !jt;
    for (int d = 0; !bad && d < e->ndim; d++)
        bad = json_array_append_new(shape, json_integer(e->shape[d])) != 0;
    if (!bad)
        bad = json_object_set_new(jt, "dtype", json_string(st_dtype_name(dtype))) ||
              json_object_set(jt, "shape", shape) || json_object_set(jt, "data_offsets", off) ||
              json_object_set(root, e->name, jt);
    json_decref(shape);
    json_decref(off);
    json_decref(jt);
    return bad ? -1 : 0;
}

static void write_tensor_data(uint8_t *dst, const float *src, size_t n, st_dtype dtype)
{
    if (n == 0) return;
    if (dtype == ST_F32) {
        memcpy(dst, src, n * 4);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h = dtype == ST_F16 ? st_f32_to_f16(src[i]) : st_f32_to_bf16(src[i]);
        dst[2 * i] = (uint8_t)(h & 0xff);
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

/* Validates the entries, sorts them by name and assigns data offsets;
 * *data_len gets the data section size. */
static int plan_layout(const st_write_entry *entries, int n, st_dtype dtype, write_item *items,
                       size_t *data_len, char *err)
{
    int rc;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        items[i].e = &entries[i];
        if ((rc = check_entry(&entries[i], i, &items[i].numel, err))) return rc;
    }
    qsort(items, (size_t)n, sizeof *items, cmp_item);
    for (int i = 0; i < n; i++) {
        if (i > 0 && strcmp(items[i - 1].e->name, items[i].e->name) == 0)
            return sm_error(err, SM_ERR_INVALID, "safetensors_serialize: tensor '%s' given twice",
                            items[i].e->name);
        items[i].offset = off;
        if (__builtin_add_overflow(off, items[i].numel * st_dtype_size(dtype), &off) ||
            off > (size_t)INT64_MAX / 2)
            return sm_error(err, SM_ERR_INVALID, "safetensors_serialize: total size overflows");
    }
    *data_len = off;
    return SM_OK;
}

/* Builds the compact header JSON, keys sorted, with {"format": "pt"}. */
static int build_header(const write_item *items, int n, st_dtype dtype, char **out, char *err)
{
    int rc = SM_OK;
    json_t *root = json_object();
    json_t *meta = json_pack("{ss}", "format", "pt");
    if (!root || !meta || json_object_set(root, "__metadata__", meta)) {
        rc = sm_error(err, SM_ERR_NOMEM, "safetensors_serialize: out of memory");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        size_t end = items[i].offset + items[i].numel * st_dtype_size(dtype);
        if (add_header_entry(root, items[i].e, dtype, items[i].offset, end)) {
            rc = sm_error(err, SM_ERR_INVALID,
                          "safetensors_serialize: tensor '%s': name is not "
                          "valid UTF-8 (or out of memory)",
                          items[i].e->name);
            goto fail;
        }
    }
    if (!(*out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS))) {
        rc = sm_error(err, SM_ERR_NOMEM, "safetensors_serialize: out of memory");
        goto fail;
    }
    /* jansson 2.14's json_dumps can return truncated text instead of NULL
     * when an allocation fails inside it (seen with every allocation made
     * to fail in turn); the header is ours and valid, so text that does not
     * parse back is that, never a file to write */
    json_in_doc *doc = NULL;
    json_in_error jerr;
    if (json_in_parse(*out, strlen(*out), &doc, &jerr) != SM_OK) {
        free(*out);
        *out = NULL;
        rc = sm_error(err, SM_ERR_NOMEM, "safetensors_serialize: out of memory");
    }
    json_in_free(doc);
fail:
    json_decref(meta);
    json_decref(root);
    return rc;
}

int safetensors_serialize(const st_write_entry *entries, int n, st_dtype dtype, uint8_t **out,
                          size_t *out_len, char *err)
{
    int rc;
    write_item *items = NULL;
    char *hdr = NULL;
    uint8_t *buf = NULL;
    size_t data_len = 0;

    *out = NULL;
    *out_len = 0;
    if (dtype != ST_F32 && dtype != ST_F16 && dtype != ST_BF16)
        return sm_error(err, SM_ERR_INVALID,
                        "safetensors_serialize: dtype %s, expected F32, F16 or "
                        "BF16",
                        st_dtype_name(dtype));
    if (n < 0 || (n > 0 && !entries))
        return sm_error(err, SM_ERR_INVALID, "safetensors_serialize: %d entries, entries %p", n,
                        (const void *)entries);
    if (!(items = calloc((size_t)(n ? n : 1), sizeof *items))) {
        rc = sm_error(err, SM_ERR_NOMEM, "safetensors_serialize: out of memory");
        goto fail;
    }
    if ((rc = plan_layout(entries, n, dtype, items, &data_len, err)) ||
        (rc = build_header(items, n, dtype, &hdr, err)))
        goto fail;
    size_t hlen = strlen(hdr);
    size_t padded = (hlen + 7) & ~(size_t)7;
    size_t total = 8 + padded + data_len;
    if (!(buf = malloc(total))) {
        rc = sm_error(err, SM_ERR_NOMEM, "safetensors_serialize: out of memory (%zu bytes)", total);
        goto fail;
    }
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    /* NOLINTNEXTLINE(bugprone-not-null-terminated-result): bytes, padded with spaces */
    memcpy(buf + 8, hdr, hlen);
    memset(buf + 8 + hlen, ' ', padded - hlen);
    for (int i = 0; i < n; i++)
        write_tensor_data(buf + 8 + padded + items[i].offset, items[i].e->data, items[i].numel,
                          dtype);
    *out = buf;
    *out_len = total;
    buf = NULL;
fail:
    free(buf);
    free(hdr);
    free(items);
    return rc;
}

/* Writes all of buf to fd, riding out short writes and EINTR. */
static int write_all(int fd, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Writes buf to tmp (created), syncs it and renames it over path. */
static int write_and_rename(const char *tmp, const char *path, const uint8_t *buf, size_t len,
                            char *err)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return sm_error(err, SM_ERR_IO, "safetensors: cannot create '%s': %s", tmp,
                        strerror(errno));
    int bad = write_all(fd, buf, len) != 0 || fsync(fd) != 0;
    int saved = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad) {
        unlink(tmp);
        return sm_error(err, SM_ERR_IO, "safetensors: cannot write '%s': %s", tmp, strerror(saved));
    }
    if (rename(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        return sm_error(err, SM_ERR_IO, "safetensors: cannot rename '%s' to '%s': %s", tmp, path,
                        strerror(saved));
    }
    return SM_OK;
}

int safetensors_write_file(const char *path, const st_write_entry *entries, int n, st_dtype dtype,
                           char *err)
{
    int rc;
    uint8_t *buf = NULL;
    size_t len = 0;
    char *tmp = NULL;

    if ((rc = safetensors_serialize(entries, n, dtype, &buf, &len, err))) goto fail;
    size_t plen = strlen(path);
    if (!(tmp = malloc(plen + 5))) {
        rc = sm_error(err, SM_ERR_NOMEM, "safetensors: out of memory");
        goto fail;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    rc = write_and_rename(tmp, path, buf, len, err);
fail:
    free(tmp);
    free(buf);
    return rc;
}
