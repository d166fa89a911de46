/* bert.h: the BERT-family encoder with a sequence-classification head.
 *
 * Shapes use B batch, T tokens (padded), C hidden, H heads, d = C/H, F the
 * intermediate size, L layers, K labels, V vocab, P positions.
 *
 * All parameters live in one float arena laid out from one size table
 * (bert_param_table); the same table drives checkpoint load and save, so the
 * order here is the order in memory. Query, key and value weights of a layer
 * are adjacent, so they form one (3C, C) matrix and one (3C) bias.
 *
 * The forward pass: embeddings (word + position + token type [+ task type])
 * -> LayerNorm -> L post-LN layers (masked multi-head self-attention, erf GELU
 * FFN) -> pooler (dense + tanh on [CLS]) -> classifier -> logits.
 */
#ifndef SM_BERT_H
#define SM_BERT_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "encoder/wide.h"
#include "format/config.h"
#include "tokenize/tokenizer.h"

typedef struct bert_layer_params {
    float *qkv_w;         /* (3C, C): query, key, value weights stacked */
    float *qkv_b;         /* (3C) */
    float *attn_out_w;    /* (C, C) */
    float *attn_out_b;    /* (C) */
    float *ln1_w, *ln1_b; /* (C) attention.output.LayerNorm */
    float *ffn_in_w;      /* (F, C) intermediate.dense */
    float *ffn_in_b;      /* (F) */
    float *ffn_out_w;     /* (C, F) output.dense */
    float *ffn_out_b;     /* (C) */
    float *ln2_w, *ln2_b; /* (C) output.LayerNorm */
    /* Packed copies of the four matrices above for reduced-precision
     * inference (bert_params_pack: a backend's pack_weight, whose kind says
     * BF16, INT8 or packed FP32, backend.h), run by be->linear_packed; NULL:
     * the FP32 weights through be->linear. */
    const backend_packed *qkv_pw, *attn_out_pw, *ffn_in_pw, *ffn_out_pw;
} bert_layer_params;

typedef struct bert_params {
    float *word_emb;            /* (V, C) */
    float *pos_emb;             /* (P, C) */
    float *type_emb;            /* (type_vocab_size, C) */
    float *task_emb;            /* (task_type_vocab_size, C) or NULL */
    float *emb_ln_w, *emb_ln_b; /* (C) */
    bert_layer_params *layers;  /* L entries (owned by whoever made the struct) */
    float *pool_w;              /* (C, C) */
    float *pool_b;              /* (C) */
    float *cls_w;               /* (K, C) or NULL when the checkpoint has no head */
    float *cls_b;               /* (K) or NULL */
} bert_params;

/* Dropout for one training micro-step. Probabilities in [0, 1); all zero
 * (or a forward for evaluation) means no dropout. The mask of every site is
 * a function of (seed, step, site, element) only (rng.h). */
typedef struct bert_dropout {
    float hidden;     /* embeddings, attention output, FFN output */
    float attention;  /* attention probabilities */
    float classifier; /* pooled vector before the classifier; for a RoBERTa
                         head also the <s> vector before classifier.dense,
                         as RobertaClassificationHead drops out both */
    uint64_t seed;
    uint64_t step; /* distinct per micro-batch */
} bert_dropout;

/* One row of the size table. `name` is the Hugging Face name without the
 * model prefix ("embeddings.word_embeddings.weight", ...), except the head,
 * which is "classifier.weight"/"classifier.bias" as in transformers
 * ("classifier.dense.*" and "classifier.out_proj.*" for RoBERTa and
 * XLM-RoBERTa; see bert_params.c). */
typedef struct bert_param_spec {
    char name[96];
    int ndim;
    int shape[2];
    size_t offset; /* in floats from the arena start */
    size_t numel;
} bert_param_spec;

/* Fills *specs (malloc'd) with the table for cfg; with_head adds the
 * classifier rows. Returns the total float count in *total. */
int bert_param_table(const bert_config *cfg, int with_head, bert_param_spec **specs, int *n_specs,
                     size_t *total, char *err);
/* Points p at the tensors of an arena laid out by bert_param_table.
 * Allocates p->layers (free with bert_params_release). */
int bert_params_bind(const bert_config *cfg, int with_head, float *arena, bert_params *p,
                     char *err);
void bert_params_release(bert_params *p);

typedef struct bert_model {
    bert_config cfg;
    tokenizer *tok;
    /* The tokenizer.json tok was read from (tokenizer_json_len bytes,
     * malloc'd), kept so that the model is stored and exported with it;
     * NULL when tok came from a vocab.txt. */
    char *tokenizer_json;
    size_t tokenizer_json_len;
    int has_head; /* the checkpoint had a classification head */
    float *arena; /* all parameters, host F32, n_floats long */
    size_t n_floats;
    bert_params p;   /* views into arena */
    wide_part *wide; /* the wide part (wide.h), owned; NULL: none (then
                            cfg.wide.set is 0) */
} bert_model;

/* Loads a Hugging Face model directory: config.json, model.safetensors, the
 * tokenizer (tokenizer.json when there is one, else vocab.txt; see
 * model_dir.c for why and for the errors that name a missing file), and a
 * sentence-transformers modules.json with its Pooling config when present
 * (pooling.h). */
int bert_model_load_dir(const char *dir, bert_model **out, char *err);
/* The same, calling stop(user) before each file is opened and before the
 * tensors are parsed: a non-zero answer ends the load with
 * SM_ERR_INTERRUPTED. stop may be NULL. */
int bert_model_load_dir_stoppable(const char *dir, int (*stop)(void *user), void *user,
                                  bert_model **out, char *err);
/* Loads from memory (a BLOB, an embedded model). Buffers are not retained. */
int bert_model_load_buffers(const char *config_json, size_t config_len, const char *vocab,
                            size_t vocab_len, const void *safetensors, size_t st_len,
                            bert_model **out, char *err);
/* A model's files in memory: the tokenizer is tokenizer_json when it is not
 * NULL (vocab is then ignored and may be NULL), else vocab. */
typedef struct bert_files {
    const char *config; /* config.json */
    size_t config_len;
    const char *vocab; /* vocab.txt, or NULL */
    size_t vocab_len;
    const char *tokenizer_json; /* tokenizer.json, or NULL */
    size_t tokenizer_json_len;
    const void *safetensors; /* model.safetensors */
    size_t safetensors_len;
} bert_files;
int bert_model_load_files(const bert_files *f, bert_model **out, char *err);
/* The tokenizer file m is stored and exported with: the tokenizer.json it
 * was loaded from (*name "tokenizer.json"), else its vocabulary as a
 * vocab.txt, one token a line (*name "vocab.txt"). *text is malloc'd,
 * *len bytes plus a NUL. */
int bert_model_tokenizer_file(const bert_model *m, const char **name, char **text, size_t *len,
                              char *err);
/* The same for a checkpoint written for masked-language modelling: the
 * pooler may be absent (transformers' BertForMaskedLM has none); it is then
 * initialised as transformers initialises a missing one, normal(0, 0.02)
 * weights drawn from seed and a zero bias. The "cls." tensors are ignored
 * here; bert_mlm.h reads the MLM head. */
int bert_model_load_buffers_mlm(const char *config_json, size_t config_len, const char *vocab,
                                size_t vocab_len, const void *safetensors, size_t st_len,
                                uint64_t seed, bert_model **out, char *err);
void bert_model_free(bert_model *m);
/* Gives m a sentence-embedding setting (pooling.h; set becomes 1): an
 * error when its word_embedding_dimension is not the hidden size. */
int bert_model_set_pooling(bert_model *m, const sm_pooling *pooling, char *err);
/* Serialises the parameters as safetensors with transformers' names (the
 * "bert.", "ernie." or "roberta." prefix, the head unprefixed; for RoBERTa
 * and XLM-RoBERTa classifier.dense and classifier.out_proj, so the file
 * loads into *ForSequenceClassification); *out malloc'd. A non-finite
 * weight (training that diverged) is an error (bert_check_finite), nothing
 * is written. */
int bert_model_save_safetensors(const bert_model *m, int dtype, void **out, size_t *out_len,
                                char *err);
/* The checkpoint name bert_model_save_safetensors writes for the table row
 * named spec_name ("roberta.encoder.layer.0.output.dense.weight",
 * "classifier.out_proj.bias", ...). */
void bert_checkpoint_name(const bert_config *cfg, const char *spec_name, char *out, size_t cap);
/* SM_OK when x[0..n) are all finite, else SM_ERR_FORMAT with "tensor
 * 'name' has a NaN at element 17" (or "an infinite value", the first one,
 * counted from 0 in row-major order) in err. Loading and saving a model
 * check every tensor with it: a model with a NaN or infinite weight answers
 * nothing useful (NaN probabilities), so it is refused, never served or
 * stored. */
int bert_check_finite(const char *name, const float *x, size_t n, char *err);
/* Number of scalar parameters, the wide part's included (what
 * sentiment_models reports). */
size_t bert_model_num_params(const bert_model *m);

/* Activations for one forward pass, for batches of up to max_batch x
 * max_seq tokens on one backend: sized for the whole batch, or on a
 * backend that bounds a pass's rows (pass_rows: the CPU) for the largest
 * pass, a larger batch running as passes of whole sequences. Not shared
 * between threads. */
typedef struct bert_workspace bert_workspace;

int bert_workspace_create(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                          bert_workspace **out, char *err);
void bert_workspace_free(bert_workspace *ws);
/* The memory bert_workspace_create takes on be for max_batch x max_seq
 * (its arenas, lanes aside), without allocating it. */
size_t bert_workspace_bytes(const backend *be, const bert_config *cfg, int max_batch, int max_seq);
backend *bert_workspace_backend(const bert_workspace *ws);
/* Lanes, for a CPU backend with several threads: n single-threaded
 * workspaces of ws's size, each on its own single-threaded CPU backend, so
 * that whole batches run concurrently, one per thread, and a forward pass
 * never waits on another thread (bert_classify_texts uses them when it has
 * more than one batch). Created on first use; owned and freed by ws. */
int bert_workspace_lanes(bert_workspace *ws, const bert_config *cfg, int n, bert_workspace ***lanes,
                         char *err);

/* Forward pass on the workspace's backend with parameters p that live on
 * that backend. ids(B,T) and lengths(B) are host memory; positions t >=
 * lengths[b] are padding. Writes logits(B,K) to host memory. Needs a head.
 * If hidden_out is non-NULL, also writes the pooled [CLS] vectors (B,C). */
int bert_forward(const bert_config *cfg, const bert_params *p, bert_workspace *ws, const int *ids,
                 const int *lengths, int B, int T, float *logits, float *pooled_out, char *err);

/* The same pass up to the last encoder layer: writes the last hidden
 * state hidden_out(B,T,C) to host memory (padding rows included); no
 * pooler, no head needed. */
int bert_forward_hidden(const bert_config *cfg, const bert_params *p, bert_workspace *ws,
                        const int *ids, const int *lengths, int B, int T, float *hidden_out,
                        char *err);

/* Text in, probabilities out (model/encoder/classifier.c): tokenizes each text,
 * orders the batch by token length to cut padding, runs the encoder in
 * batches of at most batch_size, softmaxes and writes probs(n,K) in input
 * order. truncated (n, may be NULL) gets 1 where text was cut to max_length
 * (0 or larger than the model allows = the model's maximum). */
int bert_classify_texts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                        const char *const *texts, const size_t *lens, int n, int max_length,
                        int batch_size, float *probs, int *truncated, char *err);
/* Text in, sentence embeddings out (model/encoder/classifier.c): the same batching
 * as bert_classify_texts, each text's last hidden state pooled as
 * m->cfg.pooling says (pooling.h) into emb(n, hidden_size), in input
 * order. Needs no head. */
int bert_embed_texts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                     const char *const *texts, const size_t *lens, int n, int max_length,
                     int batch_size, float *emb, int *truncated, char *err);
/* The same two with options: a stop check, stop(user) asked before each
 * text is tokenized (and inside the tokenizer, every few KB of a long one:
 * tokenizer_encode_stoppable) and between batches when they run one by
 * one, non-zero ending the call with SM_ERR_INTERRUPTED, "interrupted";
 * and, for classifying, how a text longer than max_length is read:
 * windows 0 cuts it (as bert_classify_texts), windows > 1 reads it in up
 * to that many overlapping windows of max_length tokens ([CLS] w [SEP];
 * each next window starts BERT_WINDOW_STEP_NUM/BERT_WINDOW_STEP_DEN of a
 * window later) and averages their logits before the softmax; truncated
 * is then 1 for a text longer than one window. Embeddings always cut. */
#define BERT_WINDOW_STEP_NUM 5
#define BERT_WINDOW_STEP_DEN 6
typedef struct bert_text_opts {
    int (*stop)(void *user);
    void *user;
    int windows;
} bert_text_opts;
int bert_classify_texts_opts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                             const char *const *texts, const size_t *lens, int n, int max_length,
                             int batch_size, float *probs, int *truncated, const bert_text_opts *o,
                             char *err);
int bert_embed_texts_opts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                          const char *const *texts, const size_t *lens, int n, int max_length,
                          int batch_size, float *emb, int *truncated, const bert_text_opts *o,
                          char *err);
/* Longest input the model takes (positions minus the RoBERTa offset). */
int bert_max_length(const bert_config *cfg);

/* A model's parameters on a backend (model/encoder/bert_device.c): the host arena
 * uploaded once into one allocation of be, with the views bound to it, so a
 * GPU backend runs bert_forward with &dp->p. On the CPU backend nothing is
 * copied: p points into the host arena. The copy is read-only to its users
 * and independent of m afterwards. Free it with bert_device_params_free
 * before destroying be; any backend on the same GPU may read it. */
typedef struct bert_device_params {
    backend *be;  /* owns arena */
    float *arena; /* n_floats on be (the host arena on the CPU) */
    size_t n_floats;
    int owned;     /* arena was allocated on be */
    bert_params p; /* views into arena */
} bert_device_params;

int bert_params_to_backend(backend *be, const bert_model *m, bert_device_params **out, char *err);
void bert_device_params_free(bert_device_params *dp);

/* Packed weights for inference (model/encoder/bert_packed.c): the encoder's linear
 * layers (query/key/value, attention output, FFN in and out) with weights
 * packed once by a backend (pack_weight, backend.h): converted to BF16
 * (FP32 sums), quantized to INT8 (inputs quantized per token, INT32 sums)
 * or kept FP32 and laid out for a kernel (FP32 arithmetic, only the order
 * of the sums differs from sgemm's); embeddings, LayerNorm, attention,
 * pooler and classifier stay FP32. p is a copy of src whose layers also
 * carry the packed weights; its FP32 pointers are src's, so it must not
 * outlive src's arena. The packed weights need no backend to be freed, so
 * pp may outlive the backend that packed it. Read-only once made: any
 * number of backends of that kind and their lanes may run bert_forward
 * with &pp->p at once. Only for inference: a trainer updates src and never
 * uses this. */
typedef enum bert_precision {
    BERT_FP32 = 0,    /* no packed copy: the FP32 weights */
    BERT_BF16,        /* BACKEND_PACK_BF16 */
    BERT_INT8,        /* BACKEND_PACK_INT8 */
    BERT_FP32_PACKED, /* BACKEND_PACK_F32: FP32 weights packed once */
    BERT_N_PRECISIONS
} bert_precision;

/* The four matrices of every layer, in the order of bert_pack_plan. */
enum { BERT_PACK_QKV, BERT_PACK_ATTN_OUT, BERT_PACK_FFN_IN, BERT_PACK_FFN_OUT, BERT_PACK_N };

typedef struct bert_packed_params {
    bert_params p;
    backend_packed **w; /* the packed weights, BERT_PACK_N per layer (NULL:
                           not packed), owned */
    int n_w;
} bert_packed_params;

/* What each matrix is packed as for a precision setting (plan[BERT_PACK_N]):
 * bf16 packs all four as BF16; int8 packs as INT8 every matrix whose
 * quantized inputs cost little accuracy (see bert_packed.c); fp32-packed
 * packs all four as packed FP32. */
void bert_pack_plan(bert_precision precision, bert_precision plan[BERT_PACK_N]);
/* The precision that packs weights as `kind` (backend_pack_kind):
 * BERT_BF16, BERT_INT8, BERT_FP32_PACKED; BERT_FP32 for any other value. */
bert_precision bert_precision_of_pack_kind(int kind);
/* Packs src's layers by plan (BERT_PACK_N entries, BERT_FP32 = not packed)
 * with be's pack_weight. SM_ERR_INVALID for an unknown precision,
 * SM_ERR_UNSUPPORTED when be has no packed weights of a kind the plan
 * asks for; be is not kept. */
int bert_params_pack(backend *be, const bert_config *cfg, const bert_params *src,
                     const bert_precision plan[BERT_PACK_N], bert_packed_params **out, char *err);
void bert_packed_params_free(bert_packed_params *pp);

#endif
