/* fake_gpu.h: the test backend, a stand-in for the CUDA plugin
 * (build/tests/fake_gpu.so, tests/support/fake_gpu.c).
 *
 * It exports the plugin's two symbols (gpu/sentiment_cuda.h), so the
 * extension loads it through $SENTIMENT_CUDA_PLUGIN exactly as it loads
 * sentiment_cuda.so, and hands out backends that compute with the CPU
 * backend but behave as a GPU's: memory of their own (host_memory 0, so
 * weights are uploaded), no lanes, a precision, a free-memory figure and a
 * last error. On demand it reports little free memory, refuses large
 * allocations or fails an op, so the extension's GPU paths (the per-device
 * weight cache, batch sizing by free memory, the error messages) are tested
 * on a machine without a GPU. The control functions below are found with
 * dlsym on the same handle.
 */
#ifndef FAKE_GPU_H
#define FAKE_GPU_H

#include <stddef.h>

typedef struct fake_gpu_settings {
    int devices;             /* what device_count reports (0: none) */
    size_t free_bytes;       /* what mem_info reports free ... */
    size_t total_bytes;      /* ... and in all */
    size_t max_alloc;        /* allocations above this fail (0: no limit) */
    long fail_after;         /* ops that succeed before every later one fails (-1: never) */
} fake_gpu_settings;

typedef struct fake_gpu_counts {
    int created[4];          /* backends created per device */
    size_t uploaded[4];      /* bytes uploaded per device */
    size_t largest_alloc;    /* the largest allocation asked for since fake_gpu_set */
    long ops;                /* ops run (the ones counted for fail_after) */
} fake_gpu_counts;

typedef void (*fake_gpu_set_fn)(const fake_gpu_settings *s);
typedef void (*fake_gpu_get_fn)(fake_gpu_counts *out);

#endif
