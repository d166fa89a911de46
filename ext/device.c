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
 * (or by auto), so one sentiment.so runs on machines without CUDA. The seam
 * is one symbol the plugin exports:
 *
 *   int sentiment_cuda_backend_create(int device, backend **out,
 *                                     char *desc, size_t desc_cap,
 *                                     char *err);
 *
 * returning SM_OK and a backend (model/backend.h) plus a one-line
 * description for sentiment_device() ("cuda:0 NVIDIA H200, bf16"), or an
 * error code with a message in err (SM_ERR_MAX bytes); and, optionally,
 *
 *   int sentiment_cuda_device_count(int *count, char *err);
 *
 * with which sentiment_config('device', 'cuda:N') checks that GPU N exists
 * when the setting is made rather than at the first query (gpu/
 * sentiment_cuda.h declares both). $SENTIMENT_CUDA_PLUGIN, when set, is the
 * plugin's path instead.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blas.h"
#include "errors.h"
#include "sentiment_ext.h"

typedef int (*sx_cuda_create_fn)(int device, backend **out, char *desc,
                                 size_t desc_cap, char *err);
typedef int (*sx_cuda_count_fn)(int *count, char *err);

#define SX_CUDA_PLUGIN "sentiment_cuda.so"

static pthread_mutex_t g_plugin_lock = PTHREAD_MUTEX_INITIALIZER;
static void *g_plugin;                  /* dlopen handle, never closed */
static sx_cuda_create_fn g_cuda_create;
static sx_cuda_count_fn g_cuda_count;   /* optional */

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
    snprintf(out, cap, "%.*s/%s", (int)dlen, dir, SX_CUDA_PLUGIN);
}

/* Loads the plugin once; 0 on success, else a message in err. */
static int plugin_load(char *err, size_t cap)
{
    char path[4096];
    int rc = 0;
    pthread_mutex_lock(&g_plugin_lock);
    if (g_cuda_create) goto end;
    plugin_path(path, sizeof path);
    if (access(path, R_OK) != 0) {
        snprintf(err, cap, "no CUDA support found: %.300s not present", path);
        rc = 1;
        goto end;
    }
    if (!g_plugin) g_plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g_plugin) {
        snprintf(err, cap, "cannot load CUDA plugin %.200s: %.200s", path, dlerror());
        rc = 1;
        goto end;
    }
    g_cuda_count = (sx_cuda_count_fn)dlsym(g_plugin, "sentiment_cuda_device_count");
    g_cuda_create = (sx_cuda_create_fn)dlsym(g_plugin, "sentiment_cuda_backend_create");
    if (!g_cuda_create) {
        snprintf(err, cap, "CUDA plugin %.300s lacks sentiment_cuda_backend_create", path);
        rc = 1;
    }
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

int sx_device_check(const char *fn, const char *spec, char **errmsg)
{
    char why[SM_ERR_MAX];
    if (!strcmp(spec, "auto") || !strcmp(spec, "cpu")) return 0;
    if (cuda_index(spec) < 0) {
        *errmsg = sqlite3_mprintf("%s: unknown device '%s'; expected auto, cpu, cuda or cuda:N",
                                  fn, spec);
        return 1;
    }
    if (plugin_load(why, sizeof why)) {
        *errmsg = sqlite3_mprintf("%s: device '%s' is not available: %s", fn, spec, why);
        return 1;
    }
    if (g_cuda_count) {
        int count = 0;
        why[0] = 0;
        if (g_cuda_count(&count, why) != SM_OK || count < 1) {
            *errmsg = sqlite3_mprintf("%s: device '%s' is not available: %s", fn, spec,
                                      why[0] ? why : "no CUDA device found");
            return 1;
        }
        if (cuda_index(spec) >= count) {
            *errmsg = sqlite3_mprintf("%s: device '%s' does not exist; this machine has %d GPU%s "
                                      "(cuda:0 .. cuda:%d)",
                                      fn, spec, count, count == 1 ? "" : "s", count - 1);
            return 1;
        }
    }
    return 0;
}

const char *sx_device_blas(void)
{
    char err[SM_ERR_MAX];
    (void)blas_load(err); /* on failure the description says "not loaded" */
    return blas_describe();
}

int sx_device_create(const char *fn, const char *spec, int threads,
                     backend **out, char *desc, size_t desc_cap,
                     char **errmsg)
{
    char err[SM_ERR_MAX];
    int idx = cuda_index(spec);

    *out = NULL;
    if (idx >= 0 || !strcmp(spec, "auto")) {
        char why[SM_ERR_MAX];
        if (plugin_load(why, sizeof why) == 0) {
            err[0] = 0;
            if (g_cuda_create(idx < 0 ? 0 : idx, out, desc, desc_cap, err) == SM_OK)
                return 0;
            if (idx >= 0) {
                *errmsg = sqlite3_mprintf("%s: device '%s' is not available: %s", fn, spec, err);
                return 1;
            }
        } else if (idx >= 0) {
            *errmsg = sqlite3_mprintf("%s: device '%s' is not available: %s", fn, spec, why);
            return 1;
        }
    } else if (strcmp(spec, "cpu")) {
        *errmsg = sqlite3_mprintf("%s: unknown device '%s'; expected auto, cpu, cuda or cuda:N",
                                  fn, spec);
        return 1;
    }
    if (backend_cpu_create(threads, out, err) != SM_OK) {
        *errmsg = sqlite3_mprintf("%s: cannot create the CPU backend: %s", fn, err);
        return 1;
    }
    snprintf(desc, desc_cap, "cpu: %d thread%s, %s", backend_cpu_threads(*out),
             backend_cpu_threads(*out) == 1 ? "" : "s", sx_device_blas());
    return 0;
}
