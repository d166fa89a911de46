/* device.c: where inference runs.
 *
 * Device names (sentiment_config('device', ...)):
 *   auto     the GPU when the CUDA plugin is present and finds one, else cpu
 *   cpu      the CPU backend (OpenBLAS)
 *   cuda     the first GPU; an error when there is none (never a fall-back)
 *   cuda:N   GPU number N
 *
 * The CUDA backend is a separate shared object, sentiment_cuda.so, that is
 * looked for next to sentiment.so and dlopen'd only when a GPU is asked for
 * (or by auto), so one sentiment.so runs on machines without CUDA. It
 * exports two symbols (gpu/sentiment_cuda.h), looked up here with dlsym:
 *
 *   sentiment_cuda_backend_create   required: a backend (model/core/backend.h) on
 *                                   GPU N and the one-line description
 *                                   sentiment_device() shows
 *                                   ("cuda:0 NVIDIA H200, bf16")
 *   sentiment_cuda_device_count     sentiment_config('device', 'cuda:N')
 *                                   checks that GPU N exists when the
 *                                   setting is made, not at the first query
 *
 * Everything else (precision, free memory, the last error, the description)
 * is a slot of the backend table, the same for the CPU and CUDA backends.
 * The CPU backend is made through cpu/backend_cpu.h.
 * $SENTIMENT_CUDA_PLUGIN, when set, is the plugin's path instead.
 *
 * Precision names: auto, fp32, tf32, bf16, bf16-fast, int8. The CPU
 * computes in FP32 (fp32), on a CPU with AVX512-BF16 in bf16 (the
 * encoder's linear layers with BF16 weights and inputs and FP32 sums,
 * cpu/gemm_bf16.h) and on a CPU with AVX512-VNNI in int8 (the same
 * layers with INT8 weights, inputs quantized per token and INT32 sums,
 * cpu/gemm_int8.h); tf32 and bf16-fast need a GPU, int8 is CPU-only. On
 * the CPU auto is int8 where the CPU has AVX512-VNNI for a model whose
 * labels under int8 were checked (rt_device_int8_vetted: the built-in
 * model, or a config whose int8_check passes; fp32 for weights that cannot
 * be quantized, runtime/engine.c) and fp32, the exact reference, for every
 * other model and CPU (precision int8 asks for int8 for any model). Which
 * weights a backend's linear layers run at its precision is the backend's
 * linear_pack_kind, not this file's choice. On a GPU, auto is the plugin's
 * default: $SENTIMENT_CUDA_PRECISION when it names one, else bf16.
 * The plugin's exports are cast to the typedefs of its own header,
 * gpu/sentiment_cuda.h, the one declaration both sides include.
 *
 * Owners: model weights live on a GPU once per model (runtime/registry.c), not
 * once per connection. They are allocated through one backend per GPU made
 * here on first use and kept for the life of the process (device memory
 * from one backend is usable by every backend on the same GPU, as they
 * share its primary context; gpu/README.md). The owner is only used under
 * the registry's upload lock, never for computing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "gpu/sentiment_cuda.h"
#include "runtime/device.h"
#include "runtime/registry.h"

#define RT_CUDA_PLUGIN "sentiment_cuda.so"

static pthread_mutex_t g_plugin_lock = PTHREAD_MUTEX_INITIALIZER;
static void *g_plugin; /* dlopen handle, never closed */
static sentiment_cuda_backend_create_fn g_cuda_create;
static sentiment_cuda_device_count_fn g_cuda_count; /* optional */

/* One backend per GPU that owns the cached models' weights (see above). */
static pthread_mutex_t g_owner_lock = PTHREAD_MUTEX_INITIALIZER;
static backend *g_owner[RT_MAX_GPUS];

static const char *const k_precisions[] = {"auto", "fp32", "tf32", "bf16", "bf16-fast", "int8"};

/* Where the plugin would be: the directory of the object holding this
 * code (sentiment.so, or a program linking ext/ statically). */
static void plugin_path(char *out, size_t cap)
{
    Dl_info info;
    const char *dir = ".", *env = getenv("SENTIMENT_CUDA_PLUGIN");
    size_t dlen = 1;
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    if (dladdr((void *)plugin_path, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash) {
            dir = info.dli_fname;
            dlen = (size_t)(slash - info.dli_fname);
        }
    }
    snprintf(out, cap, "%.*s/%s", (int)dlen, dir, RT_CUDA_PLUGIN);
}

/* Loads the plugin once: SM_OK, else SM_ERR_DEVICE with why in err
 * (SM_ERR_MAX bytes; what follows "is not available: " in messages, and
 * rt_device_owner's error, of registry.c's convention). */
static int plugin_load(char *err)
{
    char path[4096];
    int rc = SM_OK;
    pthread_mutex_lock(&g_plugin_lock);
    if (g_cuda_create) goto end;
    plugin_path(path, sizeof path);
    if (access(path, R_OK) != 0) {
        rc = sm_error(err, SM_ERR_DEVICE, "no CUDA support found: %.300s not present", path);
        goto end;
    }
    if (!g_plugin) g_plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g_plugin) {
        rc = sm_error(err, SM_ERR_DEVICE, "cannot load CUDA plugin %.200s: %.200s", path,
                      dlerror());
        goto end;
    }
    g_cuda_count = (sentiment_cuda_device_count_fn)dlsym(g_plugin, "sentiment_cuda_device_count");
    g_cuda_create = (sentiment_cuda_backend_create_fn)dlsym(g_plugin,
                                                            "sentiment_cuda_backend_create");
    if (!g_cuda_create)
        rc = sm_error(err, SM_ERR_DEVICE, "CUDA plugin %.300s lacks sentiment_cuda_backend_create",
                      path);
end:
    pthread_mutex_unlock(&g_plugin_lock);
    return rc;
}

/* Parses "cuda" / "cuda:N"; -1 when spec is not a CUDA name. */
static int cuda_index(const char *spec)
{
    if (!strcmp(spec, "cuda")) return 0;
    if (strncmp(spec, "cuda:", 5) || !spec[5]) return -1;
    int n = 0;
    for (const char *p = spec + 5; *p; p++) {
        if (*p < '0' || *p > '9' || n > 9999) return -1;
        n = n * 10 + (*p - '0');
    }
    return n;
}

/* The error for a cuda:N beyond RT_MAX_GPUS. */
static int too_many_gpus(const char *spec, char *err)
{
    return sm_error(err, SM_ERR_INVALID,
                    "device '%s' is not supported: at most %d GPUs (cuda:0 .. cuda:%d)", spec,
                    RT_MAX_GPUS, RT_MAX_GPUS - 1);
}

static int unknown_device(const char *spec, char *err)
{
    return sm_error(err, SM_ERR_INVALID, "unknown device '%s'; expected auto, cpu, cuda or cuda:N",
                    spec);
}

int rt_device_check(const char *spec, char *err)
{
    char why[SM_ERR_MAX];
    if (!strcmp(spec, "auto") || !strcmp(spec, "cpu")) return SM_OK;
    if (cuda_index(spec) < 0) return unknown_device(spec, err);
    if (cuda_index(spec) >= RT_MAX_GPUS) return too_many_gpus(spec, err);
    if (plugin_load(why) != SM_OK)
        return sm_error(err, SM_ERR_DEVICE, "device '%s' is not available: %s", spec, why);
    if (g_cuda_count) {
        int count = 0;
        why[0] = 0;
        if (g_cuda_count(&count, why) != SM_OK || count < 1)
            return sm_error(err, SM_ERR_DEVICE, "device '%s' is not available: %s", spec,
                            why[0] ? why : "no CUDA device found");
        if (cuda_index(spec) >= count)
            return sm_error(err, SM_ERR_DEVICE,
                            "device '%s' does not exist; this machine has %d GPU%s "
                            "(cuda:0 .. cuda:%d)",
                            spec, count, count == 1 ? "" : "s", count - 1);
    }
    return SM_OK;
}

const char *rt_device_blas(void)
{
    return backend_cpu_blas();
}

/* 1 when name is one of k_precisions (when cpu_only, one this CPU has:
 * auto, fp32, bf16 with AVX512-BF16, int8 with AVX512-VNNI). */
static int precision_known(const char *name, int cpu_only)
{
    for (size_t i = 0; i < sizeof k_precisions / sizeof *k_precisions; i++)
        if (!strcmp(name, k_precisions[i])) return !cpu_only || backend_cpu_precision_ok(name);
    return 0;
}

int rt_device_precision_check(const char *name, char *err)
{
    if (precision_known(name, 0)) return SM_OK;
    return sm_error(err, SM_ERR_INVALID,
                    "precision must be auto, fp32, tf32, bf16, bf16-fast or int8, got '%s'", name);
}

int rt_device_precision_cpu_ok(const char *name)
{
    return !name || !*name || precision_known(name, 1);
}

const char *rt_device_precision_cpu_why(const char *name)
{
    if (name && !strcmp(name, "bf16"))
        return "on the CPU needs AVX512-BF16, which this CPU lacks (use auto or fp32 here, "
               "or a CUDA device)";
    if (name && !strcmp(name, "int8"))
        return "needs a CPU with AVX512-VNNI, which this CPU lacks (use auto or fp32)";
    return "needs a CUDA device; the CPU computes in fp32 (auto, fp32), with AVX512-BF16 in "
           "bf16, with AVX512-VNNI in int8";
}

int rt_device_precision_cpu_only(const char *name)
{
    return name && !strcmp(name, "int8");
}

int rt_device_int8_vetted(const char *model_key, const sm_int8_check *check, char *why, size_t cap)
{
    /* the built-in model's INT8 accuracy was measured on its dev sets
     * (model/builtin/README.md: no label change) */
    if (model_key && !strcmp(model_key, "builtin")) {
        if (why && cap)
            snprintf(why, cap, "the built-in model's int8 labels were checked on its dev sets");
        return 1;
    }
    return sm_int8_check_passes(check, why, cap);
}

const char *rt_device_cpu_auto_precision(const char *model_key, const sm_int8_check *check,
                                         char *why, size_t cap)
{
    char line[200];
    int vetted = rt_device_int8_vetted(model_key, check, line, sizeof line);
    if (backend_cpu_auto_pack_kind(vetted) == BACKEND_PACK_INT8) {
        snprintf(why, cap, "int8: %s", line);
        return "int8";
    }
    if (vetted)
        snprintf(why, cap, "fp32: this CPU has no AVX512-VNNI (int8 would be allowed: %s)", line);
    else snprintf(why, cap, "fp32: %s", line);
    return "fp32";
}

/* What sentiment_device() says for a CPU backend: the backend's line (the
 * threads, the BLAS for training and FP32 without AVX-512F) and what the
 * linear layers run, which this file chooses per model. */
static void cpu_desc(backend *be, char *desc, size_t cap)
{
    char base[256];
    be->describe(be, base, sizeof base);
    int checked = be->linear_pack_kind(be, 1), unchecked = be->linear_pack_kind(be, 0);
    const char *fp32 = backend_cpu_fp32_packed() ? "fp32 (AVX-512F kernel)" : "fp32";
    char what[200] = ""; /* FP32 through the BLAS adds nothing to the BLAS's name */
    if (checked == BACKEND_PACK_BF16) snprintf(what, sizeof what, ", bf16 (AVX512-BF16)");
    else if (checked == BACKEND_PACK_INT8 && unchecked == BACKEND_PACK_INT8)
        snprintf(what, sizeof what, ", int8 (AVX512-VNNI)");
    else if (checked == BACKEND_PACK_INT8)
        snprintf(what, sizeof what, ", int8 (AVX512-VNNI) for checked models, %s for others", fp32);
    else if (checked == BACKEND_PACK_F32) snprintf(what, sizeof what, ", %s", fp32);
    snprintf(desc, cap, "%s%s", base, what);
}

int rt_device_set_precision(backend *be, const char *name, char *desc, size_t desc_cap, char *err)
{
    char why[SM_ERR_MAX];
    int rc;
    if (!name || !*name) name = "auto";
    if (!be || be->host_memory) { /* the CPU: which weights its linear layers run */
        if (precision_known(name, 1)) {
            if (be && (rc = be->set_precision(be, name, why)) != SM_OK)
                return sm_error(err, rc, "cannot set precision '%s': %s", name, why);
            if (be && desc) cpu_desc(be, desc, desc_cap);
            return SM_OK;
        }
        return sm_error(err, SM_ERR_INVALID, "precision '%s' %s; this connection runs on the CPU",
                        name, rt_device_precision_cpu_why(name));
    }
    if (rt_device_precision_cpu_only(name))
        return sm_error(err, SM_ERR_INVALID,
                        "precision '%s' runs on the CPU only; this connection runs on a CUDA "
                        "device (set sentiment_config('device', 'cpu') first)",
                        name);
    why[0] = 0;
    if ((rc = be->set_precision(be, name, why)) != SM_OK)
        return sm_error(err, rc, "cannot set precision '%s': %s", name,
                        why[0] ? why : "the backend refused it");
    if (desc) be->describe(be, desc, desc_cap);
    return SM_OK;
}

int rt_device_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    if (!be || be->mem_info(be, free_bytes, total_bytes) != SM_OK) return SM_ERR_UNSUPPORTED;
    return SM_OK;
}

const char *rt_device_last_error(const backend *be)
{
    const char *s = be ? be->last_error(be) : NULL;
    return s ? s : "";
}

int rt_device_owner(int gpu, backend **out, char *err)
{
    char why[SM_ERR_MAX], desc[128];
    int rc = SM_OK;
    *out = NULL;
    if (gpu < 0 || gpu >= RT_MAX_GPUS)
        return sm_error(err, SM_ERR_INVALID, "cuda:%d: at most %d GPUs are supported", gpu,
                        RT_MAX_GPUS);
    if (plugin_load(why) != SM_OK) return sm_error(err, SM_ERR_DEVICE, "%s", why);
    pthread_mutex_lock(&g_owner_lock);
    if (!g_owner[gpu]) {
        why[0] = 0;
        rc = g_cuda_create(gpu, &g_owner[gpu], desc, sizeof desc, why);
        if (rc != SM_OK) {
            g_owner[gpu] = NULL;
            sm_error(err, rc, "cuda:%d: cannot create the backend that holds model weights: %s",
                     gpu, why[0] ? why : "unknown error");
        }
    }
    *out = g_owner[gpu];
    pthread_mutex_unlock(&g_owner_lock);
    return rc;
}

int rt_device_create(const char *spec, int threads, const char *precision, backend **out,
                     char *desc, size_t desc_cap, char *err)
{
    char why[SM_ERR_MAX] = "";
    int idx = cuda_index(spec), rc;

    *out = NULL;
    if (!precision || !*precision) precision = "auto";
    if (idx >= RT_MAX_GPUS) return too_many_gpus(spec, err);
    if (idx >= 0 || !strcmp(spec, "auto")) {
        if (plugin_load(why) == SM_OK) {
            char made[SM_ERR_MAX] = "";
            rc = g_cuda_create(idx < 0 ? 0 : idx, out, desc, desc_cap, made);
            if (rc == SM_OK) {
                if (strcmp(precision, "auto") &&
                    (rc = rt_device_set_precision(*out, precision, desc, desc_cap, err)) != SM_OK) {
                    (*out)->destroy(*out);
                    *out = NULL;
                    return rc;
                }
                return SM_OK;
            }
            *out = NULL;
            if (idx >= 0) return sm_error(err, rc, "device '%s' is not available: %s", spec, made);
            snprintf(why, sizeof why, "%s", made);
        } else if (idx >= 0) {
            return sm_error(err, SM_ERR_DEVICE, "device '%s' is not available: %s", spec, why);
        }
    } else if (strcmp(spec, "cpu")) {
        return unknown_device(spec, err);
    }
    if (!precision_known(precision, 1))
        return sm_error(err, SM_ERR_INVALID, "precision '%s' %s; device '%s' runs on the CPU%s%s%s",
                        precision, rt_device_precision_cpu_why(precision), spec, why[0] ? " (" : "",
                        why, why[0] ? ")" : "");
    if ((rc = rt_device_create_cpu(threads, out, why)) != SM_OK)
        return sm_error(err, rc, "cannot create the CPU backend: %s", why);
    if ((rc = (*out)->set_precision(*out, precision, why)) != SM_OK) {
        (*out)->destroy(*out);
        *out = NULL;
        return sm_error(err, rc, "cannot set precision '%s': %s", precision, why);
    }
    cpu_desc(*out, desc, desc_cap);
    return SM_OK;
}

int rt_device_create_cpu(int threads, backend **out, char *err)
{
    return backend_cpu_create(threads, out, err);
}
