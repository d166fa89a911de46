/* fuzz_safetensors.c: libFuzzer target for the safetensors reader.
 *
 * Opens the input as a safetensors buffer; when it is accepted, every tensor
 * must be findable by name, convert to F32 (floating dtypes) within its
 * bounds, and survive a write (as F32, F16 or BF16, picked by the input
 * size) and re-read with exactly the values that dtype holds. Built by
 * scripts/fuzz.sh; with -DFUZZ_STANDALONE it is a plain program that runs
 * the files named on its command line (for replaying crashes without clang).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "format/safetensors.h"

static int is_float(st_dtype dt)
{
    return dt == ST_F32 || dt == ST_F16 || dt == ST_BF16 || dt == ST_F64;
}

/* What a float reads back as after being stored as dt. */
static uint32_t stored_bits(float f, st_dtype dt)
{
    uint32_t u;
    if (dt == ST_F16)
        f = st_f16_to_f32(st_f32_to_f16(f));
    else if (dt == ST_BF16)
        f = st_bf16_to_f32(st_f32_to_bf16(f));
    if (f != f)
        return 0x7fc00000u; /* any NaN */
    memcpy(&u, &f, 4);
    return u;
}

static void check_values(const st_tensor *t, const float *want, st_dtype dt)
{
    float *got = malloc((size_t)t->numel * sizeof *got + 1);
    char err[SM_ERR_MAX];
    if (st_tensor_to_f32(t, got, err) != SM_OK)
        __builtin_trap();
    for (int64_t i = 0; i < t->numel; i++)
        if (stored_bits(got[i], ST_F32) != stored_bits(want[i], dt))
            __builtin_trap();
    free(got);
}

/* Writes the floating tensors as dt, reads them back, compares. */
static void check_rewrite(const safetensors *st, float **vals, st_dtype dt)
{
    st_write_entry *e = calloc((size_t)st->n_tensors + 1, sizeof *e);
    int n = 0;
    for (int i = 0; i < st->n_tensors; i++) {
        const st_tensor *t = &st->tensors[i];
        if (!vals[i] || !t->name[0])
            continue;
        e[n].name = t->name;
        e[n].data = vals[i];
        e[n].ndim = t->ndim;
        memcpy(e[n].shape, t->shape, sizeof t->shape);
        n++;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[SM_ERR_MAX];
    if (safetensors_serialize(e, n, dt, &buf, &len, err) != SM_OK)
        __builtin_trap(); /* what we read, we must be able to write */
    safetensors back;
    if (safetensors_open_buffer(buf, len, &back, err) != SM_OK ||
        back.n_tensors != n)
        __builtin_trap();
    for (int i = 0; i < n; i++) {
        const st_tensor *t = safetensors_find(&back, e[i].name);
        if (!t || t->dtype != dt || t->ndim != e[i].ndim)
            __builtin_trap();
        check_values(t, e[i].data, dt);
    }
    safetensors_close(&back);
    free(buf);
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    safetensors st;
    char err[SM_ERR_MAX];
    if (safetensors_open_buffer(data, size, &st, err) != SM_OK) {
        if (st.tensors || st.n_tensors || !err[0])
            __builtin_trap(); /* a failure leaves st empty, with a message */
        return 0;
    }
    float **vals = calloc((size_t)st.n_tensors + 1, sizeof *vals);
    for (int i = 0; i < st.n_tensors; i++) {
        const st_tensor *t = &st.tensors[i];
        if (safetensors_find(&st, t->name) != t)
            __builtin_trap();
        if (t->data < st.base || t->data + t->nbytes > st.base + st.size ||
            (size_t)t->numel * st_dtype_size(t->dtype) != t->nbytes)
            __builtin_trap();
        float *dst = malloc((size_t)t->numel * sizeof *dst + 1);
        int rc = st_tensor_to_f32(t, dst, err);
        if (rc != (is_float(t->dtype) ? SM_OK : SM_ERR_UNSUPPORTED))
            __builtin_trap();
        if (rc == SM_OK)
            vals[i] = dst;
        else
            free(dst);
    }
    static const st_dtype out_dt[3] = {ST_F32, ST_F16, ST_BF16};
    check_rewrite(&st, vals, out_dt[size % 3]);
    for (int i = 0; i < st.n_tensors; i++)
        free(vals[i]);
    free(vals);
    safetensors_close(&st);
    safetensors_close(&st);
    return 0;
}

#ifdef FUZZ_STANDALONE
#include "fuzz_standalone.h"
#endif
