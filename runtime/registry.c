/* registry.c: the process-wide cache of loaded models.
 *
 * Every connection of the process shares one list of loaded models, keyed by
 * identity ("builtin"; "file:<dir>:<file>=<mtime>,<size>,<inode>..." for
 * each file a directory's model is read from; "sha256:<hex>" for a stored
 * model: the hash of its bytes; see models.c). A caller
 * acquires an entry (loading it on a miss) and releases it when done; the
 * entry's reference count says who still uses it. Unreferenced entries stay
 * cached so the next query does not reload, up to RT_CACHE_IDLE_MAX of them
 * (least recently used go first). Loading a version of a family (the same
 * database model name) marks the older versions, and other bytes stored
 * under the same version, stale: they are freed as soon as nobody uses
 * them, and a later `name@old` loads them afresh.
 *
 * On a GPU the weights are cached the same way: rt_registry_params uploads
 * an entry's parameters to GPU N on first use, through the process-wide
 * backend that device.c keeps for that GPU, and every connection's backend
 * on that GPU reads the one copy (they share the GPU's primary context). The
 * copy is freed with the entry, so eviction frees GPU memory too. CPU
 * connections computing in bf16 or int8 share one packed copy of the encoder
 * weights per entry and precision the same way (rt_registry_params_packed):
 * the first caller's CPU backend packs it, and it outlives that backend
 * (a packed weight frees itself, backend.h).
 *
 * Locking: `g_lock` guards the list, the loads in progress and the counters
 * and is held only for short bookkeeping, never while a model is read or
 * parsed. A load runs with no lock held and is listed (g_loading) under its
 * key meanwhile: a second caller asking for the same key waits on
 * `g_loaded` until that load ends, so two threads asking for the same model
 * load it once, while callers asking for any other model, loaded or not,
 * never wait behind it (one slow disk or big file blocks only its own key).
 * When a load fails its waiters wake and the first of them tries again.
 * `g_upload_lock` guards every entry's on_device[], packed[] and the owner
 * backends' use (uploads and frees), so a model is uploaded once per GPU
 * however many connections ask at the same time; it is never held together
 * with g_lock. The cache outlives every connection; sentiment.c pins
 * the shared object so it is not unloaded under it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "runtime/device.h"
#include "runtime/registry.h"

#define RT_CACHE_IDLE_MAX 8

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_loaded = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t g_upload_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_model *g_head;
static uint64_t g_tick, g_next_id = 1;
static int64_t g_loads, g_evictions;

/* Called with no registry lock held. */
static void entry_free(rt_model *e)
{
    int on_gpu = 0;
    if (!e) return;
    for (int i = 0; i < RT_MAX_GPUS; i++) on_gpu |= e->on_device[i] != NULL;
    if (on_gpu) { /* device memory goes back through the owner backends */
        pthread_mutex_lock(&g_upload_lock);
        for (int i = 0; i < RT_MAX_GPUS; i++) {
            for (int k = 0; k < RT_PACK_KINDS; k++) {
                bert_packed_params_free(e->packed[i + 1][k]);
                e->packed[i + 1][k] = NULL;
            }
            bert_device_params_free(e->on_device[i]);
            e->on_device[i] = NULL;
        }
        pthread_mutex_unlock(&g_upload_lock);
    }
    for (int k = 0; k < RT_PACK_KINDS; k++) bert_packed_params_free(e->packed[0][k]);
    bert_model_free(e->bert);
    for (int i = 0; i < RT_MODEL_ALIASES; i++) free(e->alias_family[i]);
    free(e->key);
    free(e->family);
    free(e);
}

/* Unlinks and returns the entries to free (caller frees outside the lock):
 * stale unreferenced ones, then the least recently used idle ones beyond
 * RT_CACHE_IDLE_MAX. Called with g_lock held. */
static rt_model *collect_garbage_locked(void)
{
    rt_model *dead = NULL, **pp = &g_head;
    int idle = 0;
    while (*pp) {
        rt_model *e = *pp;
        if (e->refs == 0 && e->stale) {
            *pp = e->next;
            e->next = dead;
            dead = e;
            g_evictions++;
            continue;
        }
        if (e->refs == 0) idle++;
        pp = &e->next;
    }
    while (idle > RT_CACHE_IDLE_MAX) {
        rt_model **victim = NULL;
        for (pp = &g_head; *pp; pp = &(*pp)->next)
            if ((*pp)->refs == 0 && (!victim || (*pp)->last_used < (*victim)->last_used))
                victim = pp;
        rt_model *e = *victim;
        *victim = e->next;
        e->next = dead;
        dead = e;
        g_evictions++;
        idle--;
    }
    return dead;
}

static void free_list(rt_model *dead)
{
    while (dead) {
        rt_model *next = dead->next;
        entry_free(dead);
        dead = next;
    }
}

static rt_model *find_locked(const char *key)
{
    for (rt_model *e = g_head; e; e = e->next)
        if (!e->stale && !strcmp(e->key, key)) return e;
    return NULL;
}

/* Records that (family, version) names e's bytes too (best effort: the
 * oldest alias makes room; none on out of memory). */
static void add_alias_locked(rt_model *e, const char *family, int64_t version)
{
    char *copy;
    if (e->family && !strcmp(e->family, family) && e->version == version) return;
    for (int i = 0; i < RT_MODEL_ALIASES; i++)
        if (e->alias_family[i] && e->alias_version[i] == version &&
            !strcmp(e->alias_family[i], family))
            return;
    if (!(copy = strdup(family))) return;
    free(e->alias_family[RT_MODEL_ALIASES - 1]);
    memmove(&e->alias_family[1], &e->alias_family[0],
            (RT_MODEL_ALIASES - 1) * sizeof e->alias_family[0]);
    memmove(&e->alias_version[1], &e->alias_version[0],
            (RT_MODEL_ALIASES - 1) * sizeof e->alias_version[0]);
    e->alias_family[0] = copy;
    e->alias_version[0] = version;
}

/* A load in progress: the key, on the loader's stack, listed while its
 * loader runs without any lock held. */
typedef struct loading {
    const char *key;
    struct loading *next;
} loading;
static loading *g_loading;

static int loading_locked(const char *key)
{
    for (loading *l = g_loading; l; l = l->next)
        if (!strcmp(l->key, key)) return 1;
    return 0;
}

int rt_registry_acquire(const char *key, const char *family, int64_t version, rt_loader load,
                        void *ctx, rt_model **out, char *err)
{
    rt_model *e, *dead = NULL;
    bert_model *bm = NULL;
    loading self = {key, NULL};
    int rc;

    *out = NULL;
    pthread_mutex_lock(&g_lock);
    for (;;) {
        e = find_locked(key);
        if (e) {
            if (family) add_alias_locked(e, family, version);
            e->refs++;
            e->last_used = ++g_tick;
            pthread_mutex_unlock(&g_lock);
            *out = e;
            return SM_OK;
        }
        if (!loading_locked(key)) break;
        /* the same key is being loaded: wait for it, then look again (a
         * failed load leaves nothing, and this thread tries itself) */
        pthread_cond_wait(&g_loaded, &g_lock);
    }
    self.next = g_loading;
    g_loading = &self;
    pthread_mutex_unlock(&g_lock);

    rc = load(ctx, &bm, err);
    if (rc == SM_OK) {
        e = calloc(1, sizeof *e);
        if (!e || !(e->key = strdup(key)) || (family && !(e->family = strdup(family)))) {
            rc = sm_error(err, SM_ERR_NOMEM, "out of memory caching model '%s'", key);
        } else {
            e->bert = bm;
            e->int8_check = bm->cfg.int8_check;
            e->version = version;
            bm = NULL;
            e->refs = 1;
        }
    }

    pthread_mutex_lock(&g_lock);
    for (loading **pp = &g_loading; *pp; pp = &(*pp)->next)
        if (*pp == &self) {
            *pp = self.next;
            break;
        }
    if (rc == SM_OK) {
        e->id = g_next_id++;
        e->last_used = ++g_tick;
        /* older versions of the family, and other bytes under the same
         * version (the stored row changed), are replaced */
        if (family)
            for (rt_model *o = g_head; o; o = o->next)
                if (o->family && !strcmp(o->family, family) && o->version <= version &&
                    strcmp(o->key, key))
                    o->stale = 1;
        e->next = g_head;
        g_head = e;
        g_loads++;
        dead = collect_garbage_locked();
        *out = e;
        e = NULL;
    }
    pthread_cond_broadcast(&g_loaded);
    pthread_mutex_unlock(&g_lock);

    free_list(dead);
    if (e) entry_free(e);
    bert_model_free(bm);
    return rc;
}

void rt_registry_retain(rt_model *e)
{
    pthread_mutex_lock(&g_lock);
    e->refs++;
    pthread_mutex_unlock(&g_lock);
}

void rt_registry_release(rt_model *e)
{
    rt_model *dead;
    if (!e) return;
    pthread_mutex_lock(&g_lock);
    e->refs--;
    e->last_used = ++g_tick;
    dead = collect_garbage_locked();
    pthread_mutex_unlock(&g_lock);
    free_list(dead);
}

/* The device a backend computes on: -1 host memory, else its index. */
static int device_of(const backend *be)
{
    if (be->host_memory || !be->device_index) return -1;
    return be->device_index(be);
}

/* e's device copy on device dev, uploaded by the device's owner backend on
 * first use. Called with g_upload_lock held. */
static int device_copy_locked(rt_model *e, int dev, char *err)
{
    backend *owner;
    int rc;
    if (e->on_device[dev]) return SM_OK;
    if ((rc = rt_device_owner(dev, &owner, err)) != SM_OK) return rc;
    if ((rc = bert_params_to_backend(owner, e->bert, &e->on_device[dev], err)) != SM_OK) {
        const char *why = rt_device_last_error(owner);
        e->on_device[dev] = NULL;
        if (*why) {
            size_t len = strlen(err);
            snprintf(err + len, SM_ERR_MAX - len, " (%s)", why);
        }
    }
    return rc;
}

int rt_registry_params(rt_model *e, backend *be, const bert_params **out, char *err)
{
    int dev = device_of(be), rc;
    *out = NULL;
    if (dev < 0) {
        *out = &e->bert->p;
        return SM_OK;
    }
    if (dev >= RT_MAX_GPUS)
        return sm_error(err, SM_ERR_INVALID, "cuda:%d: at most %d GPUs are supported", dev,
                        RT_MAX_GPUS);
    pthread_mutex_lock(&g_upload_lock);
    rc = device_copy_locked(e, dev, err);
    if (rc == SM_OK) *out = &e->on_device[dev]->p;
    pthread_mutex_unlock(&g_upload_lock);
    return rc;
}

int rt_registry_params_packed(rt_model *e, backend *be, int kind, const bert_params **out,
                              char *err)
{
    bert_precision plan[BERT_PACK_N];
    bert_precision precision = bert_precision_of_pack_kind(kind);
    int dev = device_of(be), rc = SM_OK;
    *out = NULL;
    if (precision == BERT_FP32)
        return sm_error(err, SM_ERR_INVALID, "packed weights: unknown kind %d", kind);
    if (dev >= RT_MAX_GPUS)
        return sm_error(err, SM_ERR_INVALID, "cuda:%d: at most %d GPUs are supported", dev,
                        RT_MAX_GPUS);
    bert_pack_plan(precision, plan);
    bert_packed_params **slot = &e->packed[dev + 1][kind];
    pthread_mutex_lock(&g_upload_lock);
    if (!*slot) {
        backend *owner;
        if (dev < 0) /* every CPU backend packs the same bits and runs what any other packed */
            rc = bert_params_pack(be, &e->bert->cfg, &e->bert->p, plan, slot, err);
        else if ((rc = device_copy_locked(e, dev, err)) == SM_OK &&
                 (rc = rt_device_owner(dev, &owner, err)) == SM_OK)
            rc = bert_params_pack(owner, &e->bert->cfg, &e->on_device[dev]->p, plan, slot, err);
    }
    *out = rc == SM_OK ? &(*slot)->p : NULL;
    pthread_mutex_unlock(&g_upload_lock);
    return rc;
}

int rt_registry_is_loaded(const char *key)
{
    int found;
    pthread_mutex_lock(&g_lock);
    found = find_locked(key) != NULL;
    pthread_mutex_unlock(&g_lock);
    return found;
}

/* The cached, current entry of (family, version), or NULL. Called with
 * g_lock held. */
static rt_model *find_version_locked(const char *family, int64_t version)
{
    for (rt_model *e = g_head; e; e = e->next) {
        if (e->stale) continue;
        if (e->family && !strcmp(e->family, family) && e->version == version) return e;
        for (int i = 0; i < RT_MODEL_ALIASES; i++)
            if (e->alias_family[i] && e->alias_version[i] == version &&
                !strcmp(e->alias_family[i], family))
                return e;
    }
    return NULL;
}

int rt_registry_is_loaded_version(const char *family, int64_t version)
{
    pthread_mutex_lock(&g_lock);
    int found = find_version_locked(family, version) != NULL;
    pthread_mutex_unlock(&g_lock);
    return found;
}

int rt_registry_version_int8_check(const char *family, int64_t version, sm_int8_check *out)
{
    pthread_mutex_lock(&g_lock);
    rt_model *e = find_version_locked(family, version);
    int found = e && e->int8_measured;
    if (found) *out = e->int8_check;
    pthread_mutex_unlock(&g_lock);
    return found;
}

sm_int8_check rt_registry_int8_check(rt_model *e)
{
    pthread_mutex_lock(&g_lock);
    sm_int8_check c = e->int8_check;
    pthread_mutex_unlock(&g_lock);
    return c;
}

void rt_registry_set_int8_check(rt_model *e, const sm_int8_check *c)
{
    pthread_mutex_lock(&g_lock);
    e->int8_check = *c;
    e->int8_measured = 1;
    pthread_mutex_unlock(&g_lock);
}

void rt_registry_stats_get(rt_registry_stats *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&g_lock);
    st->loads = g_loads;
    st->evictions = g_evictions;
    for (rt_model *e = g_head; e; e = e->next) {
        st->entries++;
        if (e->refs > 0) st->referenced++;
    }
    pthread_mutex_unlock(&g_lock);
}

void rt_registry_trim(void)
{
    rt_model *dead = NULL, **pp;
    pthread_mutex_lock(&g_lock);
    pp = &g_head;
    while (*pp) {
        rt_model *e = *pp;
        if (e->refs == 0) {
            *pp = e->next;
            e->next = dead;
            dead = e;
            g_evictions++;
        } else {
            pp = &e->next;
        }
    }
    pthread_mutex_unlock(&g_lock);
    free_list(dead);
}

/* At exit (or unload), free what nobody uses so leak checkers stay quiet. */
__attribute__((destructor)) static void registry_at_exit(void)
{
    rt_registry_trim();
}
