/* device.h: where inference runs (runtime/device.c): device and precision
 * names, the backends made for them, the CUDA plugin and the per-GPU owner
 * backends that hold cached weights.
 *
 * Room: runtime/. The one place that sees a device's own headers
 * (cpu/backend_cpu.h, the plugin's ABI gpu/sentiment_cuda.h); everything
 * above reaches a device through the backend table and these calls. Called
 * by ext/ (config.c validates settings, conn_engine.c makes a connection's
 * backend through runtime/engine.h, models_vtab.c reports auto's choice,
 * train_int8.c asks for a CPU backend) and by runtime/registry.c (owners).
 *
 * Errors: model/'s convention: SM_OK, else an SM_* status with one line in
 * err (SM_ERR_MAX bytes), written without a function name; ext/ prefixes
 * the SQL function's name when it converts (sx_from_sm). Predicates ("1
 * when ...") and functions returning strings are not error returns.
 */
#ifndef RUNTIME_DEVICE_H
#define RUNTIME_DEVICE_H

#include <stddef.h>

#include "core/backend.h"
#include "format/config.h"
#include "format/int8_check.h"

/* Validates a device name ("auto", "cpu", "cuda", "cuda:N") and, for
 * cuda:N, that GPU N exists: SM_OK, SM_ERR_INVALID for a name that is not
 * a device, SM_ERR_DEVICE for one that is not available here. */
int rt_device_check(const char *spec, char *err);
/* Creates the backend for spec ("auto": the GPU if there is one, else
 * the CPU) with precision (NULL or "" = auto); desc gets what
 * sentiment_device() shows. A GPU-only precision where the CPU is used is
 * SM_ERR_INVALID. */
int rt_device_create(const char *spec, int threads, const char *precision, backend **out,
                     char *desc, size_t desc_cap, char *err);
/* A CPU backend with `threads` threads (0: all cores), for work that runs on
 * this machine's CPU whatever the connection's device (train()'s INT8
 * check compares the CPU's FP32 and INT8 labels). */
int rt_device_create_cpu(int threads, backend **out, char *err);
/* SM_OK when name is a precision (auto, fp32, tf32, bf16, bf16-fast,
 * int8), else SM_ERR_INVALID naming the allowed values. */
int rt_device_precision_check(const char *name, char *err);
/* 1 when the CPU computes in precision name: NULL, "", auto, fp32, bf16
 * on a CPU with AVX512-BF16, int8 on a CPU with AVX512-VNNI. */
int rt_device_precision_cpu_ok(const char *name);
/* Why the CPU cannot compute in precision name (for a message after
 * "precision 'name' ..."): it needs a CUDA device, AVX512-BF16 or
 * AVX512-VNNI. */
const char *rt_device_precision_cpu_why(const char *name);
/* 1 when precision name runs on the CPU only (int8). */
int rt_device_precision_cpu_only(const char *name);
/* 1 when INT8's labels were checked for a model (its registry key and
 * INT8 check): the built-in model ("builtin"), or a check that passes its
 * rule (model/format/int8_check.h: written by train(), measured by
 * sentiment_int8_check()); why (may be NULL) gets the reason either way.
 * What a backend's linear_pack_kind takes as int8_ok. */
int rt_device_int8_vetted(const char *model_key, const sm_int8_check *check, char *why, size_t cap);
/* What precision auto runs a model with on this machine's CPU, "int8" or
 * "fp32", with why ("int8: held-out accuracy ...", "fp32: int8 not checked
 * for this model", ...) in why (cap bytes). */
const char *rt_device_cpu_auto_precision(const char *model_key, const sm_int8_check *check,
                                         char *why, size_t cap);
/* Applies precision name to a live backend (be NULL: only checks that the
 * CPU computes in it): on a backend of host memory only what
 * rt_device_precision_cpu_ok accepts (else SM_ERR_INVALID saying why), and
 * desc (may be NULL) gets the new description; on a GPU the plugin
 * switches and desc gets its description (a CPU-only precision, int8, is
 * SM_ERR_INVALID). */
int rt_device_set_precision(backend *be, const char *name, char *desc, size_t desc_cap, char *err);
/* Free and total memory of a backend with memory of its own (a GPU):
 * SM_OK, or SM_ERR_UNSUPPORTED (both 0) for host memory or when the plugin
 * cannot tell. */
int rt_device_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes);
/* Why the last op of a backend failed ("" when it keeps no reason, as the
 * CPU's, or does not know). */
const char *rt_device_last_error(const backend *be);
/* The process-wide backend of device `device` (a backend's device_index)
 * that owns cached model weights, created on first use and never
 * destroyed; called under the registry's upload lock. */
int rt_device_owner(int device, backend **out, char *err);
/* "OpenBLAS 0.3.21 SkylakeX" once BLAS is loaded (cpu/blas.h). */
const char *rt_device_blas(void);

#endif
