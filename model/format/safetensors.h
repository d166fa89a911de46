/* safetensors.h: read and write the safetensors checkpoint format.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {...}}, then the data section. Reading validates everything
 * (JSON, dtype, shape product x element size == byte range, ranges inside the
 * file and non-overlapping) before any tensor is handed out. A file is mmap'd;
 * a buffer is borrowed, not copied. Tensor data is converted to F32 on request.
 */
#ifndef SM_SAFETENSORS_H
#define SM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

typedef enum {
    ST_F32 = 0,
    ST_F16,
    ST_BF16,
    ST_F64,
    ST_I64,
    ST_I32,
    ST_I8,
    ST_U8,
    ST_BOOL
} st_dtype;

typedef struct st_tensor {
    char *name; /* owned by the safetensors struct */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data; /* points into the file/buffer */
    size_t nbytes;
} st_tensor;

typedef struct safetensors {
    st_tensor *tensors; /* sorted by name */
    int n_tensors;
    const uint8_t *base; /* whole file/buffer */
    size_t size;
    void *mapping; /* non-NULL when we mmap'd a file */
} safetensors;

int safetensors_open_file(const char *path, safetensors *st, char *err);
/* Borrows buf: it must outlive st. */
int safetensors_open_buffer(const void *buf, size_t len, safetensors *st, char *err);
void safetensors_close(safetensors *st);

const st_tensor *safetensors_find(const safetensors *st, const char *name);
const char *st_dtype_name(st_dtype dt);
size_t st_dtype_size(st_dtype dt);

/* Converts a floating tensor (F32, F16, BF16, F64) to F32 into dst
 * (t->numel floats). Other dtypes: SM_ERR_UNSUPPORTED naming the tensor. */
int st_tensor_to_f32(const st_tensor *t, float *dst, char *err);

/* Writer: tensors given as F32, stored as `dtype` (ST_F32, ST_F16 or
 * ST_BF16, round-to-nearest-even). Produces a malloc'd buffer. */
typedef struct st_write_entry {
    const char *name;
    const float *data;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} st_write_entry;

int safetensors_serialize(const st_write_entry *entries, int n, st_dtype dtype, uint8_t **out,
                          size_t *out_len, char *err);
int safetensors_write_file(const char *path, const st_write_entry *entries, int n, st_dtype dtype,
                           char *err);

/* Half-precision conversions, exposed for tests and backends. */
float st_f16_to_f32(uint16_t h);
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);
uint16_t st_f32_to_bf16(float f);

#endif
