/* fake_gpu.c: the test backend (fake_gpu.h): a CUDA plugin stand-in whose
 * backends run the CPU backend's ops behind a GPU's face.
 *
 * Each backend is a copy of a single-threaded CPU backend's table (the ops
 * find their state through be->ctx, which is the CPU backend's) with the
 * device slots replaced: memory is counted and may be refused, mem_info
 * says what the settings say, every forward op may be made to fail, and
 * last_error says why, as the CUDA backend's does. Owns its backends and the
 * process-wide settings and counts (one mutex).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "gpu/forward_scratch.h"
#include "support/fake_gpu.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct fake {
    backend be;    /* first: a backend * is a fake * */
    backend *cpu;  /* whose ops and ctx be borrows */
    int device;
    char precision[16];
    char err[SM_ERR_MAX];
} fake;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_gpu_settings g_set = {2, (size_t)8 << 30, (size_t)8 << 30, 0, -1};
static fake_gpu_counts g_counts;

static fake *fake_of(const backend *be)
{
    return (fake *)be;
}

static void put_err(fake *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_err(fake *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
}

/* 0 when the next op may run, else SM_ERR_DEVICE with the reason kept. */
static int op_gate(backend *be, const char *op)
{
    pthread_mutex_lock(&g_lock);
    long n = g_counts.ops++;
    int fail = g_set.fail_after >= 0 && n >= g_set.fail_after;
    pthread_mutex_unlock(&g_lock);
    if (!fail) return SM_OK;
    put_err(fake_of(be), "cuda:%d: %s failed: an injected fault of the test backend",
            fake_of(be)->device, op);
    return SM_ERR_DEVICE;
}

EXPORT void fake_gpu_set(const fake_gpu_settings *s)
{
    pthread_mutex_lock(&g_lock);
    g_set = *s;
    g_counts.largest_alloc = 0;
    pthread_mutex_unlock(&g_lock);
}

EXPORT void fake_gpu_get(fake_gpu_counts *out)
{
    pthread_mutex_lock(&g_lock);
    *out = g_counts;
    pthread_mutex_unlock(&g_lock);
}

/* ---- memory ------------------------------------------------------------------------- */

static void *fake_alloc(backend *be, size_t bytes)
{
    fake *f = fake_of(be);
    pthread_mutex_lock(&g_lock);
    if (bytes > g_counts.largest_alloc) g_counts.largest_alloc = bytes;
    size_t limit = g_set.max_alloc;
    pthread_mutex_unlock(&g_lock);
    if (limit && bytes > limit) {
        put_err(f, "cuda:%d: cannot allocate %.1f MiB: out of memory (the test backend's limit)",
                f->device, (double)bytes / 1048576.0);
        return NULL;
    }
    return f->cpu->alloc(f->cpu, bytes);
}

static void fake_free(backend *be, void *p)
{
    fake_of(be)->cpu->free(fake_of(be)->cpu, p);
}

static int fake_upload(backend *be, void *dst, const void *src, size_t bytes)
{
    fake *f = fake_of(be);
    pthread_mutex_lock(&g_lock);
    if (f->device < 4) g_counts.uploaded[f->device] += bytes;
    pthread_mutex_unlock(&g_lock);
    memcpy(dst, src, bytes);
    return SM_OK;
}

static int fake_download(backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(dst, src, bytes);
    return SM_OK;
}

/* ---- forward ops: the CPU's, each behind the fault gate ----------------------------- */

static int fake_linear(backend *be, float *out, const float *in, const float *W, const float *b,
                       int R, int K, int N)
{
    int rc = op_gate(be, "linear");
    return rc ? rc : fake_of(be)->cpu->linear(be, out, in, W, b, R, K, N);
}

static int fake_layernorm(backend *be, float *out, float *mean, float *rstd, const float *in,
                          const float *w, const float *b, int R, int C, float eps)
{
    int rc = op_gate(be, "layernorm");
    return rc ? rc : fake_of(be)->cpu->layernorm(be, out, mean, rstd, in, w, b, R, C, eps);
}

static int fake_attention(backend *be, float *out, float *att, const float *qkv,
                          const int *lengths, int B, int T, int H, int d, float scale)
{
    int rc = op_gate(be, "attention");
    return rc ? rc : fake_of(be)->cpu->attention(be, out, att, qkv, lengths, B, T, H, d, scale);
}

static int fake_embed(backend *be, float *out, const int *ids, const int *types,
                      const float *word, const float *pos, const float *type, const float *task,
                      int B, int T, int C, int pos_offset)
{
    int rc = op_gate(be, "embed");
    return rc ? rc
              : fake_of(be)->cpu->embed(be, out, ids, types, word, pos, type, task, B, T, C,
                                        pos_offset);
}

/* ---- the device slots --------------------------------------------------------------- */

static void fake_describe(const backend *be, char *desc, size_t cap)
{
    const fake *f = fake_of(be);
    if (desc && cap) snprintf(desc, cap, "cuda:%d test backend, %s", f->device, f->precision);
}

static int fake_set_precision(backend *be, const char *name, char *err)
{
    static const char *const ok[] = {"fp32", "tf32", "bf16", "bf16-fast"};
    fake *f = fake_of(be);
    if (name && !strcmp(name, "auto")) name = "bf16";
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (name && !strcmp(name, ok[i])) {
            snprintf(f->precision, sizeof f->precision, "%s", name);
            return SM_OK;
        }
    return sm_error(err, SM_ERR_UNSUPPORTED, "precision '%s' is not one of fp32, tf32, bf16, "
                    "bf16-fast", name ? name : "(null)");
}

static int fake_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes)
{
    (void)be;
    pthread_mutex_lock(&g_lock);
    *free_bytes = g_set.free_bytes;
    *total_bytes = g_set.total_bytes;
    pthread_mutex_unlock(&g_lock);
    return SM_OK;
}

static size_t fake_forward_scratch(const backend *be, int batch, int seq, int hidden, int ffn,
                                   int heads)
{
    (void)be;
    return cuda_forward_scratch_bytes(batch, seq, hidden, ffn, heads);
}

static int fake_device_index(const backend *be)
{
    return fake_of(be)->device;
}

static const char *fake_last_error(const backend *be)
{
    return fake_of(be)->err;
}

static int fake_lanes(const backend *be)
{
    (void)be;
    return 1;
}

static int fake_lane_create(backend *be, backend **out, char *err)
{
    (void)be;
    *out = NULL;
    return sm_error(err, SM_ERR_UNSUPPORTED, "lanes: the test backend has none");
}

static void fake_destroy(backend *be)
{
    if (!be) return;
    fake *f = fake_of(be);
    f->cpu->destroy(f->cpu);
    free(f);
}

/* ---- the plugin's exports (gpu/sentiment_cuda.h) ------------------------------------ */

EXPORT int sentiment_cuda_device_count(int *count, char *err)
{
    pthread_mutex_lock(&g_lock);
    *count = g_set.devices;
    pthread_mutex_unlock(&g_lock);
    if (*count < 1) return sm_error(err, SM_ERR_DEVICE, "no CUDA device: the test backend has none");
    return SM_OK;
}

EXPORT int sentiment_cuda_backend_create(int device, backend **out, char *desc, size_t desc_cap,
                                         char *err)
{
    int count = 0;
    if (desc && desc_cap) desc[0] = 0;
    if (!out) return sm_error(err, SM_ERR_INVALID, "cuda:%d: no place for the backend", device);
    *out = NULL;
    int rc = sentiment_cuda_device_count(&count, err);
    if (rc) return rc;
    if (device < 0 || device >= count || device >= 4)
        return sm_error(err, SM_ERR_INVALID, "cuda:%d does not exist: the test backend has %d",
                        device, count);
    fake *f = calloc(1, sizeof *f);
    if (!f) return sm_error(err, SM_ERR_NOMEM, "out of memory creating the test backend");
    if ((rc = backend_cpu_create(1, &f->cpu, err))) {
        free(f);
        return rc;
    }
    f->be = *f->cpu; /* the CPU's ops and ctx ... */
    backend *be = &f->be;
    be->name = "cuda"; /* ... behind a GPU's face */
    be->host_memory = 0;
    be->alloc = fake_alloc;
    be->free = fake_free;
    be->upload = fake_upload;
    be->download = fake_download;
    be->linear = fake_linear;
    be->layernorm = fake_layernorm;
    be->attention = fake_attention;
    be->embed = fake_embed;
    be->pack_weight = NULL; /* as a GPU: no CPU-packed weights */
    be->linear_packed = NULL;
    be->linear_pack_kind = NULL; /* FP32 weights as they are */
    be->forward_scratch_bytes = fake_forward_scratch; /* the plugin's estimate */
    be->device_index = fake_device_index;
    be->describe = fake_describe;
    be->set_precision = fake_set_precision;
    be->mem_info = fake_mem_info;
    be->last_error = fake_last_error;
    be->gemm_tflops = NULL;
    be->lanes = fake_lanes;
    be->lane_create = fake_lane_create;
    be->destroy = fake_destroy;
    f->device = device;
    snprintf(f->precision, sizeof f->precision, "bf16");
    pthread_mutex_lock(&g_lock);
    g_counts.created[device]++;
    pthread_mutex_unlock(&g_lock);
    fake_describe(be, desc, desc_cap);
    *out = be;
    return SM_OK;
}
