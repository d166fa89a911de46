/* test_safetensors.c: safetensors reader, writer and half-precision
 * conversions: round trips through a buffer and a file, F16/BF16 edge cases
 * (checked exhaustively over all 65536 half values), and every kind of
 * corrupt file, each built here from a valid one, failing with the right code
 * and a message that names the tensor. Run from the repository root.
 */
#define _GNU_SOURCE /* memmem */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"
#include "format/safetensors.h"

/* ---- helpers ------------------------------------------------------------- */

#define assert_contains(haystack, needle)                                     \
    do {                                                                      \
        const char *h_ = (haystack), *n_ = (needle);                          \
        if (!strstr(h_, n_))                                                  \
            fail_msg("expected message containing \"%s\", got \"%s\"", n_,    \
                     h_);                                                     \
    } while (0)

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A raw safetensors image: 8-byte length, header text as given, data. The
 * result is malloc'd at exactly *len bytes so ASan sees any over-read. */
static uint8_t *make_raw(const char *hdr, const void *data, size_t dlen,
                         size_t *len)
{
    size_t h = strlen(hdr);
    uint8_t *b = malloc(8 + h + dlen + 1);
    assert_non_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, h);
    if (dlen)
        memcpy(b + 8 + h, data, dlen);
    *len = 8 + h + dlen;
    return b;
}

/* Opens a raw image made from hdr and dlen zero bytes; returns the code and
 * leaves the message in err. */
static int open_raw(const char *hdr, size_t dlen, char *err)
{
    size_t len;
    uint8_t *zeros = calloc(1, dlen + 1);
    uint8_t *b = make_raw(hdr, zeros, dlen, &len);
    safetensors st;
    err[0] = 0;
    int rc = safetensors_open_buffer(b, len, &st, err);
    if (rc == SM_OK)
        safetensors_close(&st);
    free(b);
    free(zeros);
    return rc;
}

static void expect_format_error(const char *hdr, size_t dlen,
                                const char *want1, const char *want2)
{
    char err[SM_ERR_MAX];
    int rc = open_raw(hdr, dlen, err);
    if (rc != SM_ERR_FORMAT)
        fail_msg("header %s: expected SM_ERR_FORMAT, got %d (%s)", hdr, rc,
                 err);
    assert_contains(err, want1);
    if (want2)
        assert_contains(err, want2);
}

static const float W[6] = {1.0f, -2.5f, 0.125f, 3e-3f, -1e4f, 65504.0f};
static const float B[3] = {0.5f, -0.25f, 7.0f};
static const float S[1] = {42.0f};

/* Four tensors: 2-D, 1-D, a scalar and an empty one, given unsorted. */
static void sample_entries(st_write_entry e[4])
{
    memset(e, 0, 4 * sizeof *e);
    e[0] = (st_write_entry){.name = "encoder.weight", .data = W, .ndim = 2,
                            .shape = {2, 3}};
    e[1] = (st_write_entry){.name = "bias", .data = B, .ndim = 1,
                            .shape = {3}};
    e[2] = (st_write_entry){.name = "scale", .data = S, .ndim = 0};
    e[3] = (st_write_entry){.name = "empty", .data = NULL, .ndim = 2,
                            .shape = {0, 4}};
}

static uint8_t *sample_buffer(st_dtype dt, size_t *len)
{
    st_write_entry e[4];
    uint8_t *buf = NULL;
    char err[SM_ERR_MAX];
    sample_entries(e);
    assert_int_equal(safetensors_serialize(e, 4, dt, &buf, len, err), SM_OK);
    return buf;
}

static float expect_stored(float x, st_dtype dt)
{
    if (dt == ST_F16)
        return st_f16_to_f32(st_f32_to_f16(x));
    if (dt == ST_BF16)
        return st_bf16_to_f32(st_f32_to_bf16(x));
    return x;
}

static void check_tensor(const safetensors *st, const char *name,
                         st_dtype dt, int ndim, const int64_t *shape,
                         const float *want, int64_t numel)
{
    char err[SM_ERR_MAX];
    const st_tensor *t = safetensors_find(st, name);
    if (!t)
        fail_msg("tensor '%s' not found", name);
    assert_string_equal(t->name, name);
    assert_int_equal(t->dtype, dt);
    assert_int_equal(t->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        assert_int_equal(t->shape[i], shape[i]);
    assert_int_equal(t->numel, numel);
    assert_int_equal(t->nbytes, (size_t)numel * st_dtype_size(dt));
    float got[8];
    assert_int_equal(st_tensor_to_f32(t, got, err), SM_OK);
    for (int64_t i = 0; i < numel; i++)
        assert_true(fbits(got[i]) == fbits(expect_stored(want[i], dt)));
}

static void check_sample(const safetensors *st, st_dtype dt)
{
    assert_int_equal(st->n_tensors, 4);
    /* sorted by name for bsearch */
    for (int i = 1; i < st->n_tensors; i++)
        assert_true(strcmp(st->tensors[i - 1].name, st->tensors[i].name) < 0);
    check_tensor(st, "encoder.weight", dt, 2, (int64_t[]){2, 3}, W, 6);
    check_tensor(st, "bias", dt, 1, (int64_t[]){3}, B, 3);
    check_tensor(st, "scale", dt, 0, NULL, S, 1);
    check_tensor(st, "empty", dt, 2, (int64_t[]){0, 4}, NULL, 0);
    assert_null(safetensors_find(st, "missing"));
    assert_null(safetensors_find(st, "__metadata__"));
    assert_null(safetensors_find(st, ""));
}

/* ---- round trips --------------------------------------------------------- */

static void roundtrip_buffer(st_dtype dt)
{
    size_t len;
    uint8_t *buf = sample_buffer(dt, &len);
    safetensors st;
    char err[SM_ERR_MAX];

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    assert_int_equal(hlen % 8, 0);
    assert_true(8 + hlen <= len);
    assert_int_equal(buf[8], '{');
    const char *meta = "\"__metadata__\":{\"format\":\"pt\"}";
    assert_non_null(memmem(buf + 8, hlen, meta, strlen(meta)));
    assert_int_equal(safetensors_open_buffer(buf, len, &st, err), SM_OK);
    assert_ptr_equal(st.base, buf);
    assert_int_equal(st.size, len);
    assert_null(st.mapping);
    check_sample(&st, dt);
    safetensors_close(&st);
    free(buf);
}

static void test_roundtrip_f32(void **state)
{
    (void)state;
    roundtrip_buffer(ST_F32);
}

static void test_roundtrip_f16(void **state)
{
    (void)state;
    roundtrip_buffer(ST_F16);
}

static void test_roundtrip_bf16(void **state)
{
    (void)state;
    roundtrip_buffer(ST_BF16);
}

/* Stored values are exactly what the dtype holds: spot checks. */
static void test_stored_values(void **state)
{
    (void)state;
    size_t len;
    safetensors st;
    char err[SM_ERR_MAX];
    float got[6];
    uint8_t *buf = sample_buffer(ST_F16, &len);
    assert_int_equal(safetensors_open_buffer(buf, len, &st, err), SM_OK);
    assert_int_equal(st_tensor_to_f32(safetensors_find(&st, "encoder.weight"),
                                      got, err), SM_OK);
    assert_true(got[0] == 1.0f && got[1] == -2.5f && got[2] == 0.125f);
    assert_true(got[4] == -1e4f && got[5] == 65504.0f);
    assert_true(fabsf(got[3] - 3e-3f) < 1e-6f);
    safetensors_close(&st);
    free(buf);

    buf = sample_buffer(ST_BF16, &len);
    assert_int_equal(safetensors_open_buffer(buf, len, &st, err), SM_OK);
    assert_int_equal(st_tensor_to_f32(safetensors_find(&st, "encoder.weight"),
                                      got, err), SM_OK);
    assert_true(got[0] == 1.0f && got[1] == -2.5f && got[2] == 0.125f);
    assert_true(got[4] == -9984.0f); /* nearest bf16 to -1e4 */
    assert_true(got[5] == 65536.0f);
    safetensors_close(&st);
    free(buf);
}

static char tmpdir[64];

static int make_tmpdir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_safetensors.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void tmp_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static void test_write_file_mmap(void **state)
{
    (void)state;
    char path[128], tmp[140], err[SM_ERR_MAX];
    st_write_entry e[4];
    safetensors st;
    st_dtype dts[3] = {ST_F32, ST_F16, ST_BF16};

    tmp_path(path, sizeof path, "model.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    sample_entries(e);
    for (int i = 0; i < 3; i++) { /* also overwrites the previous file */
        assert_int_equal(safetensors_write_file(path, e, 4, dts[i], err),
                         SM_OK);
        assert_int_equal(access(tmp, F_OK), -1);
        assert_int_equal(safetensors_open_file(path, &st, err), SM_OK);
        assert_non_null(st.mapping);
        check_sample(&st, dts[i]);

        /* the file holds exactly what serialize produces */
        uint8_t *buf;
        size_t len;
        assert_int_equal(safetensors_serialize(e, 4, dts[i], &buf, &len, err),
                         SM_OK);
        assert_int_equal(st.size, len);
        assert_memory_equal(st.base, buf, len);
        free(buf);
        safetensors_close(&st);
    }
}

static void test_write_file_errors(void **state)
{
    (void)state;
    char path[160], err[SM_ERR_MAX];
    st_write_entry e[4];
    sample_entries(e);

    tmp_path(path, sizeof path, "no/such/dir/model.safetensors");
    assert_int_equal(safetensors_write_file(path, e, 4, ST_F32, err),
                     SM_ERR_IO);
    assert_contains(err, "no/such/dir/model.safetensors.tmp");
    assert_contains(err, strerror(ENOENT));

    /* rename onto a non-empty directory fails; the .tmp is removed */
    char sub[170], tmp[170];
    tmp_path(path, sizeof path, "isdir");
    snprintf(sub, sizeof sub, "%s/x", path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(safetensors_write_file(path, e, 4, ST_F32, err),
                     SM_ERR_IO);
    assert_contains(err, "rename");
    assert_int_equal(access(tmp, F_OK), -1);

    /* a bad entry is reported before anything is written */
    e[1].shape[0] = -3;
    tmp_path(path, sizeof path, "bad.safetensors");
    assert_int_equal(safetensors_write_file(path, e, 4, ST_F32, err),
                     SM_ERR_INVALID);
    assert_int_equal(access(path, F_OK), -1);
}

static void test_open_file_errors(void **state)
{
    (void)state;
    char path[128], err[SM_ERR_MAX];
    safetensors st;

    tmp_path(path, sizeof path, "missing.safetensors");
    assert_int_equal(safetensors_open_file(path, &st, err), SM_ERR_IO);
    assert_contains(err, path);
    assert_contains(err, strerror(ENOENT));
    safetensors_close(&st);

    assert_int_equal(safetensors_open_file(tmpdir, &st, err), SM_ERR_IO);
    assert_contains(err, tmpdir);
    assert_contains(err, "it is a directory");

    tmp_path(path, sizeof path, "empty.safetensors");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(safetensors_open_file(path, &st, err), SM_ERR_FORMAT);
    assert_contains(err, path);
    assert_contains(err, "0 bytes");

    tmp_path(path, sizeof path, "short.safetensors");
    f = fopen(path, "wb");
    fwrite("abcde", 1, 5, f);
    fclose(f);
    assert_int_equal(safetensors_open_file(path, &st, err), SM_ERR_FORMAT);
    assert_contains(err, "5 bytes");

    /* a corrupt file: the message names the file and the tensor */
    size_t len;
    uint8_t *raw = make_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],"
                            "\"data_offsets\":[0,8]}}", "\0\0\0\0\0\0\0\0", 8,
                            &len);
    tmp_path(path, sizeof path, "corrupt.safetensors");
    f = fopen(path, "wb");
    fwrite(raw, 1, len, f);
    fclose(f);
    free(raw);
    assert_int_equal(safetensors_open_file(path, &st, err), SM_ERR_FORMAT);
    assert_contains(err, path);
    assert_contains(err, "tensor 'w'");
    assert_null(st.tensors);
    assert_null(st.mapping);
    safetensors_close(&st);

    /* /dev/null is not a regular file */
    assert_int_equal(safetensors_open_file("/dev/null", &st, err), SM_ERR_IO);
    assert_contains(err, "/dev/null");
}

static void test_close_is_safe(void **state)
{
    (void)state;
    safetensors st;
    memset(&st, 0, sizeof st);
    safetensors_close(&st);
    safetensors_close(&st);
    safetensors_close(NULL);

    size_t len;
    char err[SM_ERR_MAX];
    uint8_t *buf = sample_buffer(ST_F32, &len);
    assert_int_equal(safetensors_open_buffer(buf, len, &st, err), SM_OK);
    safetensors_close(&st);
    safetensors_close(&st);
    assert_null(st.tensors);
    assert_int_equal(st.n_tensors, 0);
    assert_null(safetensors_find(&st, "bias"));
    free(buf);
}

/* Data at odd addresses: the reader must not rely on alignment. */
static void test_unaligned_buffer(void **state)
{
    (void)state;
    st_dtype dts[3] = {ST_F32, ST_F16, ST_BF16};
    for (int k = 0; k < 3; k++) {
        size_t len;
        uint8_t *buf = sample_buffer(dts[k], &len);
        for (size_t shift = 1; shift < 8; shift++) {
            uint8_t *mis = malloc(len + shift);
            memcpy(mis + shift, buf, len);
            safetensors st;
            char err[SM_ERR_MAX];
            assert_int_equal(safetensors_open_buffer(mis + shift, len, &st,
                                                     err), SM_OK);
            check_sample(&st, dts[k]);
            safetensors_close(&st);
            free(mis);
        }
        free(buf);
    }
}

/* Hand-made files with F64 and integer tensors, and header padding. */
static void test_other_dtypes(void **state)
{
    (void)state;
    double d[3] = {1.5, -1e300, 1e-300};
    int32_t ints[2] = {1, 2};
    uint8_t data[32];
    memcpy(data, d, 24);
    memcpy(data + 24, ints, 8);
    size_t len;
    uint8_t *raw = make_raw("{\"d\":{\"dtype\":\"F64\",\"shape\":[3],"
                            "\"data_offsets\":[0,24]},\"i\":{\"dtype\":\"I32\","
                            "\"shape\":[1,2],\"data_offsets\":[24,32]},"
                            "\"__metadata__\":{\"format\":\"pt\",\"x\":\"y\"}}"
                            "        ", data, 32, &len);
    safetensors st;
    char err[SM_ERR_MAX];
    float out[3];
    assert_int_equal(safetensors_open_buffer(raw, len, &st, err), SM_OK);
    assert_int_equal(st.n_tensors, 2);
    const st_tensor *t = safetensors_find(&st, "d");
    assert_int_equal(t->dtype, ST_F64);
    assert_int_equal(st_tensor_to_f32(t, out, err), SM_OK);
    assert_true(out[0] == 1.5f);
    assert_true(isinf(out[1]) && out[1] < 0);
    assert_true(out[2] == 0.0f);
    t = safetensors_find(&st, "i");
    assert_int_equal(t->dtype, ST_I32);
    assert_int_equal(st_tensor_to_f32(t, out, err), SM_ERR_UNSUPPORTED);
    assert_contains(err, "'i'");
    assert_contains(err, "I32");
    safetensors_close(&st);
    free(raw);

    /* every dtype name is accepted, with its element size */
    const char *names[] = {"F32", "F16", "BF16", "F64", "I64",
                           "I32", "I8",  "U8",   "BOOL"};
    const size_t sizes[] = {4, 2, 2, 8, 8, 4, 1, 1, 1};
    for (int i = 0; i < 9; i++) {
        char hdr[200];
        snprintf(hdr, sizeof hdr, "{\"t\":{\"dtype\":\"%s\",\"shape\":[2],"
                 "\"data_offsets\":[0,%zu]}}", names[i], 2 * sizes[i]);
        assert_int_equal(open_raw(hdr, 2 * sizes[i], err), SM_OK);
        assert_string_equal(st_dtype_name((st_dtype)i), names[i]);
        assert_int_equal(st_dtype_size((st_dtype)i), sizes[i]);
    }
    assert_string_equal(st_dtype_name((st_dtype)99), "?");
    assert_int_equal(st_dtype_size((st_dtype)99), 0);
}

/* Valid but unusual: no tensors, gaps, zero-size tensors anywhere. */
static void test_valid_edge_headers(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    assert_int_equal(open_raw("{}", 0, err), SM_OK);
    assert_int_equal(open_raw("{\"__metadata__\":{}}   ", 0, err), SM_OK);
    /* a gap between tensors and trailing data are tolerated */
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
                              "\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"U8\","
                              "\"shape\":[2],\"data_offsets\":[4,6]}}", 10,
                              err), SM_OK);
    /* an empty tensor inside another's range is not an overlap */
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],"
                              "\"data_offsets\":[0,4]},\"z\":{\"dtype\":\"F32\","
                              "\"shape\":[0],\"data_offsets\":[2,2]}}", 4,
                              err), SM_OK);
    /* extra keys in a tensor entry are ignored */
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
                              "\"data_offsets\":[0,1],\"note\":1}}", 1, err),
                     SM_OK);
}

/* ---- corruption ---------------------------------------------------------- */

/* Cutting a valid file anywhere fails cleanly: in the length prefix, inside
 * the header (every byte), and inside the data. */
static void test_truncated(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = sample_buffer(ST_F32, &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *b = malloc(cut ? cut : 1);
        memcpy(b, buf, cut);
        safetensors st;
        char err[SM_ERR_MAX] = "";
        int rc = safetensors_open_buffer(cut ? b : NULL, cut, &st, err);
        if (rc != SM_ERR_FORMAT)
            fail_msg("cut at %zu of %zu: got %d (%s)", cut, len, rc, err);
        if (cut < 8)
            assert_contains(err, "too short");
        else if (cut < 8 + hlen)
            assert_contains(err, "runs past the end");
        else
            assert_contains(err, "end beyond the data section");
        if (cut >= 8 + hlen)
            assert_contains(err, "tensor '");
        assert_null(st.tensors);
        safetensors_close(&st);
        free(b);
    }
    free(buf);
}

/* Changes the length prefix of a valid file. */
static void test_bad_header_length(void **state)
{
    (void)state;
    size_t len;
    char err[SM_ERR_MAX];
    safetensors st;
    uint8_t *buf = sample_buffer(ST_F32, &len);
    uint64_t vals[] = {UINT64_MAX, (uint64_t)1 << 40, 100000001, len - 7,
                       len};
    const char *want[] = {"absurd", "absurd", "absurd", "runs past",
                          "runs past"};
    for (int i = 0; i < 5; i++) {
        uint8_t *b = malloc(len);
        memcpy(b, buf, len);
        for (int k = 0; k < 8; k++)
            b[k] = (uint8_t)(vals[i] >> (8 * k));
        assert_int_equal(safetensors_open_buffer(b, len, &st, err),
                         SM_ERR_FORMAT);
        assert_contains(err, want[i]);
        free(b);
    }
    /* header length cut inside the JSON (before the padding) */
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    while (buf[8 + hlen - 1] == ' ')
        hlen--;
    uint8_t *b = malloc(len);
    memcpy(b, buf, len);
    for (int k = 0; k < 8; k++)
        b[k] = (uint8_t)((hlen - 1) >> (8 * k));
    assert_int_equal(safetensors_open_buffer(b, len, &st, err), SM_ERR_FORMAT);
    assert_contains(err, "not valid JSON");
    free(b);
    free(buf);
}

static void test_bad_json(void **state)
{
    (void)state;
    expect_format_error("{\"a\": ", 0, "not valid JSON", NULL);
    expect_format_error("", 0, "not valid JSON", NULL);
    expect_format_error("{\"a\":{}} trailing", 0, "not valid JSON", NULL);
    expect_format_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_"
                        "offsets\":[0,4]}}\x01", 4, "not valid JSON", NULL);
    expect_format_error("[1, 2]", 0, "must be a JSON object", NULL);
    expect_format_error("42", 0, "must be a JSON object", NULL); /* JSON, not an object */
    expect_format_error("{\"w\": 5}", 0, "tensor 'w'", "must be an object");
    expect_format_error("{\"w\": [1]}", 0, "tensor 'w'", "must be an object");
    expect_format_error("{\"__metadata__\": [1]}", 0, "__metadata__", NULL);
    expect_format_error("{\"__metadata__\": {\"format\": 1}}", 0,
                        "__metadata__", "'format'");
}

static void test_dtype_errors(void **state)
{
    (void)state;
    expect_format_error("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                        "tensor 'w'", "missing 'dtype'");
    expect_format_error("{\"w\":{\"dtype\":\"F8\",\"shape\":[2],"
                        "\"data_offsets\":[0,2]}}", 2, "tensor 'w'",
                        "unknown dtype 'F8'");
    expect_format_error("{\"w\":{\"dtype\":\"f32\",\"shape\":[2],"
                        "\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
                        "unknown dtype 'f32'");
    expect_format_error("{\"w\":{\"dtype\":4,\"shape\":[2],"
                        "\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
                        "'dtype' must be a string");
}

static void test_shape_errors(void **state)
{
    (void)state;
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}",
                        8, "tensor 'w'", "missing 'shape'");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],"
                        "\"data_offsets\":[0,0]}}", 0, "tensor 'w'",
                        "shape[0] must be a non-negative integer");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2, 2.5],"
                        "\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
                        "shape[1]");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],"
                        "\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
                        "shape[0]");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":2,"
                        "\"data_offsets\":[0,8]}}", 8, "tensor 'w'",
                        "'shape' must be an array");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                        "\"data_offsets\":[0,1]}}", 1, "tensor 'w'",
                        "9 dimensions");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,"
                        "4294967296],\"data_offsets\":[0,1]}}", 1, "tensor 'w'",
                        "overflows");
    expect_format_error("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
                        "\"data_offsets\":[0,0]}}", 0, "tensor 'w'",
                        "byte size overflows");
    /* exactly the message a user sees */
    char err[SM_ERR_MAX];
    assert_int_equal(open_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[3,4],"
                              "\"data_offsets\":[0,40]}}", 48, err),
                     SM_ERR_FORMAT);
    assert_string_equal(err, "safetensors: tensor 'x': shape [3, 4] F32 needs "
                             "48 bytes, data_offsets give 40");
    expect_format_error("{\"x\":{\"dtype\":\"BF16\",\"shape\":[],"
                        "\"data_offsets\":[0,4]}}", 4, "tensor 'x': shape [] "
                        "BF16 needs 2 bytes, data_offsets give 4", NULL);
}

static void test_offset_errors(void **state)
{
    (void)state;
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
                        "tensor 'w'", "missing 'data_offsets'");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[8,0]}}", 8, "tensor 'w'",
                        "begin > end");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[0,1000]}}", 8, "tensor 'w'",
                        "end beyond the data section (8 bytes)");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[8,16]}}", 8, "tensor 'w'",
                        "end beyond");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[0]}}", 8, "tensor 'w'",
                        "'data_offsets' must be two");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[0,8,16]}}", 16, "tensor 'w'",
                        "'data_offsets' must be two");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[-8,0]}}", 8, "tensor 'w'",
                        "'data_offsets' must be two");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[0,\"8\"]}}", 8, "tensor 'w'",
                        "'data_offsets'");
    expect_format_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":{\"0\":8}}}", 8, "tensor 'w'",
                        "'data_offsets'");
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],"
                        "\"data_offsets\":[9223372036854775807,"
                        "9223372036854775807]}}", 8, "tensor 'w'",
                        "end beyond");
}

static void test_overlap_and_duplicates(void **state)
{
    (void)state;
    expect_format_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],"
                        "\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F32\","
                        "\"shape\":[4],\"data_offsets\":[8,24]}}", 24,
                        "'a' [0, 16)", "'b' [8, 24) overlap");
    /* the same range twice */
    expect_format_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],"
                        "\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"I32\","
                        "\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'a'",
                        "'b'");
    /* one tensor inside another, listed out of order, with a third after */
    expect_format_error("{\"c\":{\"dtype\":\"U8\",\"shape\":[2],"
                        "\"data_offsets\":[20,22]},\"big\":{\"dtype\":\"U8\","
                        "\"shape\":[16],\"data_offsets\":[0,16]},\"in\":"
                        "{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":"
                        "[10,12]}}", 22, "'big' [0, 16)", "'in' [10, 12)");
    /* adjacent is fine */
    char err[SM_ERR_MAX];
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],"
                              "\"data_offsets\":[0,16]},\"b\":{\"dtype\":"
                              "\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
                              24, err), SM_OK);
    expect_format_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
                        "\"data_offsets\":[0,1]},\"w\":{\"dtype\":\"U8\","
                        "\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
                        "duplicate", "'w'");
}

/* Flipping any single header byte never crashes or leaks; most fail. */
static void test_header_byte_flips(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = sample_buffer(ST_F16, &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    const uint8_t subs[] = {0, '"', '{', '}', '[', ']', ',', ':', '-', '9',
                            0xff, 'x'};
    for (size_t pos = 0; pos < 8 + hlen; pos++) {
        for (size_t s = 0; s < sizeof subs; s++) {
            uint8_t *b = malloc(len);
            memcpy(b, buf, len);
            b[pos] = subs[s];
            safetensors st;
            char err[SM_ERR_MAX];
            float out[8];
            if (safetensors_open_buffer(b, len, &st, err) == SM_OK) {
                for (int i = 0; i < st.n_tensors; i++)
                    if (st.tensors[i].numel <= 8)
                        st_tensor_to_f32(&st.tensors[i], out, err);
                safetensors_close(&st);
            } else {
                assert_null(st.tensors);
            }
            free(b);
        }
    }
    free(buf);
}

/* ---- writer argument checks -------------------------------------------- */

static void test_serialize_errors(void **state)
{
    (void)state;
    st_write_entry e[4];
    uint8_t *buf = (uint8_t *)1;
    size_t len = 1;
    char err[SM_ERR_MAX];

    sample_entries(e);
    assert_int_equal(safetensors_serialize(e, 4, ST_I32, &buf, &len, err),
                     SM_ERR_INVALID);
    assert_contains(err, "I32");
    assert_null(buf);
    assert_int_equal(len, 0);

    e[2].name = "bias";
    assert_int_equal(safetensors_serialize(e, 4, ST_F32, &buf, &len, err),
                     SM_ERR_INVALID);
    assert_contains(err, "'bias' given twice");

    sample_entries(e);
    e[0].name = NULL;
    assert_int_equal(safetensors_serialize(e, 4, ST_F32, &buf, &len, err),
                     SM_ERR_INVALID);
    assert_contains(err, "entry 0 has no name");

    sample_entries(e);
    e[0].name = "__metadata__";
    assert_int_equal(safetensors_serialize(e, 4, ST_F32, &buf, &len, err),
                     SM_ERR_INVALID);
    assert_contains(err, "reserved");

    sample_entries(e);
    e[1].shape[0] = -1;
    assert_int_equal(safetensors_serialize(e, 4, ST_F32, &buf, &len, err),
                     SM_ERR_INVALID);
    assert_contains(err, "tensor 'bias': shape[0] is -1");

    sample_entries(e);
    e[1].ndim = ST_MAX_DIMS + 1;
    assert_int_equal(safetensors_serialize(e, 4, ST_F32, &buf, &len, err),
                     SM_ERR_INVALID);
    assert_contains(err, "tensor 'bias': ndim 9");

    sample_entries(e);
    e[1].data = NULL;
    assert_int_equal(safetensors_serialize(e, 4, ST_F32, &buf, &len, err),
                     SM_ERR_INVALID);
    assert_contains(err, "tensor 'bias': data is NULL");

    sample_entries(e);
    e[1].name = "bad\xff";
    assert_int_equal(safetensors_serialize(e, 4, ST_F32, &buf, &len, err),
                     SM_ERR_INVALID);
    assert_contains(err, "UTF-8");

    sample_entries(e);
    e[0].ndim = 2;
    e[0].shape[0] = INT64_MAX / 2;
    e[0].shape[1] = 4;
    assert_int_equal(safetensors_serialize(e, 4, ST_F32, &buf, &len, err),
                     SM_ERR_INVALID);
    assert_contains(err, "too many elements");

    assert_int_equal(safetensors_serialize(NULL, 1, ST_F32, &buf, &len, err),
                     SM_ERR_INVALID);

    /* zero tensors is a valid (metadata-only) file */
    safetensors st;
    assert_int_equal(safetensors_serialize(NULL, 0, ST_F32, &buf, &len, err),
                     SM_OK);
    assert_int_equal(safetensors_open_buffer(buf, len, &st, err), SM_OK);
    assert_int_equal(st.n_tensors, 0);
    safetensors_close(&st);
    free(buf);
}

/* Names with UTF-8 and JSON escapes survive the round trip. */
static void test_names_roundtrip(void **state)
{
    (void)state;
    float v[2] = {1, 2};
    st_write_entry e[3] = {
        {.name = "层.权重", .data = v, .ndim = 1, .shape = {2}},
        {.name = "quote\"back\\slash\n", .data = v, .ndim = 1, .shape = {1}},
        {.name = "A", .data = v, .ndim = 1, .shape = {2}},
    };
    uint8_t *buf;
    size_t len;
    char err[SM_ERR_MAX];
    safetensors st;
    assert_int_equal(safetensors_serialize(e, 3, ST_F32, &buf, &len, err),
                     SM_OK);
    assert_int_equal(safetensors_open_buffer(buf, len, &st, err), SM_OK);
    for (int i = 0; i < 3; i++)
        assert_non_null(safetensors_find(&st, e[i].name));
    assert_int_equal(safetensors_find(&st, "quote\"back\\slash\n")->numel, 1);
    safetensors_close(&st);
    free(buf);
}

/* ---- half precision ------------------------------------------------------ */

static void test_f16_known_values(void **state)
{
    (void)state;
    struct { float f; uint16_t h; } cases[] = {
        {0.0f, 0x0000},        {-0.0f, 0x8000},      {1.0f, 0x3c00},
        {-2.0f, 0xc000},       {0.5f, 0x3800},       {65504.0f, 0x7bff},
        {0x1p-14f, 0x0400},    {0x1p-24f, 0x0001},   {-0x1p-24f, 0x8001},
        {1023 * 0x1p-24f, 0x03ff},                   {0.333251953125f, 0x3555},
        {INFINITY, 0x7c00},    {-INFINITY, 0xfc00},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(st_f32_to_f16(cases[i].f), cases[i].h);
        assert_true(fbits(st_f16_to_f32(cases[i].h)) == fbits(cases[i].f));
    }
    /* rounding to nearest, ties to even */
    assert_int_equal(st_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(st_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(st_f32_to_f16(1e6f), 0x7c00);
    assert_int_equal(st_f32_to_f16(-1e6f), 0xfc00);
    assert_int_equal(st_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie, even */
    assert_int_equal(st_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(st_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(st_f32_to_f16(0x1p-25f), 0x0000);        /* tie, even */
    assert_int_equal(st_f32_to_f16(3 * 0x1p-25f), 0x0002);    /* tie, even */
    assert_int_equal(st_f32_to_f16(0x1p-25f + 0x1p-35f), 0x0001);
    assert_int_equal(st_f32_to_f16(0x1p-26f), 0x0000);
    assert_int_equal(st_f32_to_f16(-0x1p-30f), 0x8000);
    assert_int_equal(st_f32_to_f16(0x1p-149f), 0x0000);
    assert_int_equal(st_f32_to_f16((0x3ff + 0.5f) * 0x1p-24f), 0x0400);
    /* NaN stays NaN, sign kept */
    assert_true(isnan(st_f16_to_f32(st_f32_to_f16(NAN))));
    assert_true((st_f32_to_f16(bitsf(0x7f800001)) & 0x7c00) == 0x7c00);
    assert_true((st_f32_to_f16(bitsf(0x7f800001)) & 0x3ff) != 0);
    assert_true(st_f32_to_f16(bitsf(0xffc00000)) & 0x8000);
    assert_true(isnan(st_f16_to_f32(0x7c01)));
    assert_true(isnan(st_f16_to_f32(0xfe00)));
}

/* Every half value converts to F32 and back to itself (NaNs to a NaN). */
static void test_f16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan) {
            assert_true(isnan(f));
            uint16_t back = st_f32_to_f16(f);
            assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
            assert_int_equal(back & 0x8000, h & 0x8000);
        } else if (st_f32_to_f16(f) != h) {
            fail_msg("half 0x%04x -> %g -> 0x%04x", h, (double)f,
                     st_f32_to_f16(f));
        }
    }
}

/* F32 -> F16 against the compiler's own correctly rounded conversion, over
 * a stride through every float bit pattern plus all values near halves. */
static void test_f16_against_reference(void **state)
{
    (void)state;
#ifdef __FLT16_MAX__
    for (uint64_t u = 0; u <= 0xffffffffu; u += 997) {
        float f = bitsf((uint32_t)u);
        if (isnan(f))
            continue;
        _Float16 r = (_Float16)f;
        uint16_t want;
        memcpy(&want, &r, 2);
        if (st_f32_to_f16(f) != want)
            fail_msg("f32 0x%08x: got 0x%04x want 0x%04x", (uint32_t)u,
                     st_f32_to_f16(f), want);
    }
    /* every half, and the floats just around each halfway point */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float lo = st_f16_to_f32((uint16_t)h);
        float hi = st_f16_to_f32((uint16_t)(h + 1));
        float mid = lo + (hi - lo) / 2; /* exact in F32 */
        float probe[3] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) {
            _Float16 r = (_Float16)probe[k];
            uint16_t want;
            memcpy(&want, &r, 2);
            assert_int_equal(st_f32_to_f16(probe[k]), want);
            assert_int_equal(st_f32_to_f16(-probe[k]), want | 0x8000);
        }
    }
#else
    skip(); /* the compiler has no _Float16 to compare with (gcc >= 12 on x86-64 has) */
#endif
}

/* Correctly rounded F32 -> BF16, computed the slow way. */
static uint16_t bf16_reference(float f)
{
    uint32_t u = fbits(f);
    uint16_t lo = (uint16_t)(u >> 16);
    uint16_t hi = (uint16_t)(lo + 1);
    double dl = fabs((double)f - (double)st_bf16_to_f32(lo));
    double dh = (hi & 0x7f80) == 0x7f80 && (hi & 0x7f) == 0
                    ? fabs((double)f - copysign(0x1p128, (double)f))
                    : fabs((double)f - (double)st_bf16_to_f32(hi));
    if ((u & 0xffff) == 0)
        return lo;
    if (dl < dh || (dl == dh && !(lo & 1)))
        return lo;
    return hi;
}

static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(st_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(st_f32_to_bf16(-2.0f), 0xc000);
    assert_int_equal(st_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);   /* tie */
    assert_int_equal(st_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie */
    assert_int_equal(st_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(st_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(st_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(st_f32_to_bf16(3.4028235e38f), 0x7f80); /* FLT_MAX */
    assert_int_equal(st_f32_to_bf16(0x1p-149f), 0x0000);
    assert_int_equal(st_f32_to_bf16(-0.0f), 0x8000);
    assert_true(st_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(st_bf16_to_f32(0x0001) == 0x1p-133f); /* subnormal */
    /* NaN stays NaN, even when only low payload bits are set */
    assert_true(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))));
    assert_true(isnan(st_bf16_to_f32(st_f32_to_bf16(bitsf(0x7f800001)))));
    assert_true(isnan(st_bf16_to_f32(st_f32_to_bf16(bitsf(0xff80ffff)))));
    assert_true(st_f32_to_bf16(bitsf(0xff800001)) & 0x8000);

    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = st_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(st_bf16_to_f32(st_f32_to_bf16(f))));
        else
            assert_int_equal(st_f32_to_bf16(f), h);
    }
    for (uint64_t u = 0; u <= 0xffffffffu; u += 1009) {
        float f = bitsf((uint32_t)u);
        if (isnan(f))
            continue;
        if (st_f32_to_bf16(f) != bf16_reference(f))
            fail_msg("f32 0x%08x: got 0x%04x want 0x%04x", (uint32_t)u,
                     st_f32_to_bf16(f), bf16_reference(f));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_f32),
        cmocka_unit_test(test_roundtrip_f16),
        cmocka_unit_test(test_roundtrip_bf16),
        cmocka_unit_test(test_stored_values),
        cmocka_unit_test(test_write_file_mmap),
        cmocka_unit_test(test_write_file_errors),
        cmocka_unit_test(test_open_file_errors),
        cmocka_unit_test(test_close_is_safe),
        cmocka_unit_test(test_unaligned_buffer),
        cmocka_unit_test(test_other_dtypes),
        cmocka_unit_test(test_valid_edge_headers),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_bad_header_length),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_dtype_errors),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_offset_errors),
        cmocka_unit_test(test_overlap_and_duplicates),
        cmocka_unit_test(test_header_byte_flips),
        cmocka_unit_test(test_serialize_errors),
        cmocka_unit_test(test_names_roundtrip),
        cmocka_unit_test(test_f16_known_values),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_f16_against_reference),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
