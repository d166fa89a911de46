/* registry.h: the process-wide cache of loaded models (runtime/registry.c).
 *
 * Room: runtime/, the process runtime under the SQL surface (README.md,
 * Layout). Includes model/ (any room) and, through the backend table,
 * nothing of a device's own. Called by ext/ (models.c resolves names to
 * entries, the SQL objects release them) and by runtime/engine.c (the
 * parameters a backend reads).
 *
 * Errors: model/'s convention (core/errors.h): SM_OK or an SM_* status with
 * a message in err (SM_ERR_MAX bytes). The cache is shared by every
 * connection and outlives each: it allocates with malloc, never with
 * SQLite's allocator. ext/ converts at its calls (sx_from_sm).
 */
#ifndef RUNTIME_REGISTRY_H
#define RUNTIME_REGISTRY_H

#include <stdint.h>

#include "core/backend.h"
#include "encoder/bert.h"
#include "format/int8_check.h"

/* GPUs a process can use (cuda:0 .. cuda:15). */
#define RT_MAX_GPUS 16

/* One loaded model. Fields are read-only for everyone but registry.c; an
 * entry stays valid while the caller holds a reference. */
typedef struct rt_model {
    char *key;       /* identity: "builtin", "file:<path>:<mtime>:<size>",
                           "sha256:<hex>" (a stored model's bytes) */
    char *family;    /* what a newer version replaces ("db:<file>:<name>") or NULL */
    int64_t version; /* version within the family */
    /* other (family, version) pairs that named the same bytes (a copied
     * version, another database), for sentiment_models.loaded */
#define RT_MODEL_ALIASES 4
    char *alias_family[RT_MODEL_ALIASES];
    int64_t alias_version[RT_MODEL_ALIASES];
    bert_model *bert;
    uint64_t id; /* unique per load, never reused */
    int refs;    /* guarded by the registry mutex */
    int stale;   /* a newer version of the family was loaded */
    uint64_t last_used;
    /* the weights on device N (a backend's device_index), uploaded on first
     * use by rt_registry_params through the device's owner backend and freed
     * with the entry; guarded by the registry's upload lock */
    bert_device_params *on_device[RT_MAX_GPUS];
    /* packed copies of the encoder's linear layers (bert_params_pack), one
     * per memory (0: the host's, N + 1: device N) and backend_pack_kind,
     * made on first use by rt_registry_params_packed and freed with the
     * entry (before the device copies they point into); same lock */
#define RT_PACK_KINDS (BACKEND_PACK_F32 + 1)
    bert_packed_params *packed[RT_MAX_GPUS + 1][RT_PACK_KINDS];
    /* the INT8 check precision auto follows: the config's, until one is
     * measured in this process (rt_registry_set_int8_check); guarded by
     * the registry mutex, read with rt_registry_int8_check */
    sm_int8_check int8_check;
    int int8_measured; /* 1 once int8_check was set that way */
    struct rt_model *next;
} rt_model;

/* Loads a model for the registry; returns SM_OK or an error code with a
 * message in err (SM_ERR_MAX bytes). */
typedef int (*rt_loader)(void *ctx, bert_model **out, char *err);

/* Returns a referenced entry for key, loading it with load(ctx) when it is
 * not cached. Concurrent callers asking for the same key load it once.
 * Loading version v of a family (NULL: none) marks the family's older
 * versions stale. */
int rt_registry_acquire(const char *key, const char *family, int64_t version, rt_loader load,
                        void *ctx, rt_model **out, char *err);
/* Adds a reference to an entry the caller already holds. */
void rt_registry_retain(rt_model *e);
void rt_registry_release(rt_model *e);
/* The entry's parameters as backend be reads them: the host copy on a
 * backend of host memory; on a GPU the copy uploaded once per entry and
 * device (be's device_index; the first caller uploads, through the
 * process-wide owner backend of that device, see device.c), shared by
 * every backend of the device. Valid while the caller holds a reference;
 * freed with the entry. */
int rt_registry_params(rt_model *e, backend *be, const bert_params **out, char *err);
/* The same with the encoder's four matrices per layer packed as `kind`
 * (backend_pack_kind: what be's linear_pack_kind asks for), made once per
 * entry, memory and kind by the first caller: on the CPU packed by be from
 * the host copy (every CPU backend packs the same bits and runs what any
 * other packed), on a GPU by the device's owner backend from its device
 * copy. Shared and valid as above. */
int rt_registry_params_packed(rt_model *e, backend *be, int kind, const bert_params **out,
                              char *err);
/* 1 when key is in the cache (and not stale). */
int rt_registry_is_loaded(const char *key);
/* The entry's INT8 check (format/int8_check.h): its config.json's, or the
 * last one measured since it was loaded. */
sm_int8_check rt_registry_int8_check(rt_model *e);
/* Replaces the entry's INT8 check for every connection of the process
 * while the entry is cached (sentiment_int8_check() measured it); the
 * model's config is left as loaded. */
void rt_registry_set_int8_check(rt_model *e, const sm_int8_check *c);
/* 1 when a version of family is in the cache (and not stale). */
int rt_registry_is_loaded_version(const char *family, int64_t version);
/* When a version of family is in the cache (and not stale) with an INT8
 * check measured since it was loaded: 1, with the check in *out; else 0
 * (the stored config's check is the one). */
int rt_registry_version_int8_check(const char *family, int64_t version, sm_int8_check *out);

typedef struct rt_registry_stats {
    int64_t loads;     /* models loaded since the process started */
    int64_t evictions; /* entries freed */
    int entries;       /* entries cached now */
    int referenced;    /* of which in use */
} rt_registry_stats;
void rt_registry_stats_get(rt_registry_stats *st);
/* Frees every unreferenced entry. */
void rt_registry_trim(void);

#endif
