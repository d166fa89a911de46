/* engine.h: one connection's inference engine (runtime/engine.c): its
 * backend, its activation workspaces, and the one call that runs texts
 * through a cached model.
 *
 * Room: runtime/. Includes model/ and runtime/ only; knows no SQLite. Called
 * by ext/conn_engine.c, which keeps an rt_engine in each connection, turns
 * the connection's settings into rt_settings and its interrupt and progress
 * handler into the stop callback, and converts errors (sx_from_sm); and by
 * the ext/ files that compute on the connection's backend (train.c,
 * explain.c: rt_engine_backend, then e->be).
 *
 * Errors: model/'s convention: SM_OK, else an SM_* status with one line in
 * err (SM_ERR_MAX bytes) without a function name.
 */
#ifndef RUNTIME_ENGINE_H
#define RUNTIME_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "encoder/bert.h"
#include "runtime/registry.h"

/* What a connection asks of its engine (its sentiment_config settings). */
typedef struct rt_settings {
    const char *device;    /* "auto", "cpu", "cuda", "cuda:N" */
    int threads;           /* 0 = all cores */
    const char *precision; /* NULL, "" or "auto", or a precision name (runtime/device.h) */
    int batch_size;        /* rows per batch when a call names none */
    int max_length;        /* 0 = the model's maximum */
    int long_text_windows; /* 0: long texts truncated; else up to that many windows */
} rt_settings;

#define RT_MAX_WORKSPACES 4

/* A workspace kept for one recently used model. */
typedef struct rt_ws_slot {
    rt_model *model; /* referenced while the slot is used */
    bert_workspace *ws;
    const bert_params *params; /* the model's parameters as ws's backend
                                   reads them (rt_registry_params) */
    int batch, seq;            /* what ws holds */
    int asked;                 /* the largest batch asked of it; above
                                   batch when free GPU memory capped it */
    int int8_vetted;           /* rt_device_int8_vetted when params was
                                   chosen: a new INT8 check chooses again */
    uint64_t last_used;
} rt_ws_slot;

/* Zeroed: no backend yet (made on first use). Owned by one connection and
 * used by one thread at a time. */
typedef struct rt_engine {
    backend *be;    /* NULL until rt_engine_backend */
    char desc[128]; /* what sentiment_device() reports */
    rt_ws_slot ws[RT_MAX_WORKSPACES];
    uint64_t tick;
    /* counters (sentiment_debug) */
    int64_t rows;        /* texts classified or embedded */
    int64_t truncated;   /* of which cut to max_length */
    int64_t not_chinese; /* of which mostly not Chinese (rt_text_not_chinese) */
} rt_engine;

/* The texts of one run and how to read them. No text is NULL or blank
 * (the SQL surface skips those). */
typedef struct rt_texts {
    const char *const *texts;
    const size_t *lens;
    int n;
    int batch_size;         /* <= 0: the settings' */
    int windows;            /* -1: the settings' long_text_windows; 0 truncate;
                               else up to that many windows (bert_text_opts) */
    int (*stop)(void *ctx); /* polled between texts, inside a long text's
                               tokenizing and between batches; NULL: never */
    void *stop_ctx;
} rt_texts;

/* Drops the backend and the workspaces (after a device or threads change);
 * the counters stay. */
void rt_engine_reset(rt_engine *e);
/* Makes sure e->be exists, made from s's device, threads and precision
 * (e->desc gets its description). */
int rt_engine_backend(rt_engine *e, const rt_settings *s, char *err);
/* Classifies in->n texts with model m: probs gets n x num_labels,
 * truncated (may be NULL) gets n flags. Counts rows, truncations and texts
 * mostly not Chinese. */
int rt_engine_classify(rt_engine *e, const rt_settings *s, rt_model *m, const rt_texts *in,
                       float *probs, int *truncated, char *err);
/* The same batching for sentence embeddings: emb gets n x hidden_size
 * floats, each text pooled as the model's pooling setting says
 * (model/format/pooling.h). Needs no classification head. */
int rt_engine_embed(rt_engine *e, const rt_settings *s, rt_model *m, const rt_texts *in, float *emb,
                    int *truncated, char *err);
/* How many batches one rt_engine_classify call runs at once: one per lane
 * of the backend (the CPU: one per thread, see bert.h), else 1. */
int rt_engine_parallel_batches(const rt_engine *e);
/* The effective max_length for model m under settings s. */
int rt_engine_max_length(const rt_settings *s, const bert_model *m);

#endif
