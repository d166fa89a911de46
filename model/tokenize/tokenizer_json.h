/* tokenizer_json.h: the tokenizer.json pipeline (tokenizer_json.c) as
 * tokenizer.c uses it: load a file into a vocabulary (vocab.h) and a
 * pipeline, then tokenize and encode text with the two. The pipeline knows
 * nothing of the tokenizer type; tokenizer.c wraps both in it. Internal to
 * model/: callers use tokenizer.h.
 */
#ifndef SM_TOKENIZER_JSON_H
#define SM_TOKENIZER_JSON_H

#include <stddef.h>

#include "tokenize/vocab.h"

typedef struct tj_pipeline tj_pipeline;

/* The special ids a loaded tokenizer.json gives, -1 for each it lacks: cls
 * and sep are the first ids the post-processor puts before and after the
 * text, unk is the model's unknown id, pad and mask are "<pad>"/"[PAD]" and
 * "<mask>"/"[MASK]" when present. */
typedef struct tj_special {
    int cls, sep, pad, unk, mask;
} tj_special;

/* tj_load flag: Unigram scores read as the Rust tokenizers library reads
 * them (tokenizer.h, TOKENIZER_JSON_RUST_SCORES). */
#define TJ_RUST_SCORES 1

/* Parses a tokenizer.json (len bytes, json may be NULL when len is 0):
 * *vocab_out gets the model's pieces (id = index), *out the pipeline, *sp
 * the special ids; on an error all are left unset and nothing is kept.
 * Unsupported components are SM_ERR_UNSUPPORTED naming the component, a
 * malformed file SM_ERR_FORMAT. */
int tj_load(const char *json, size_t len, int flags, vocab **vocab_out, tj_pipeline **out,
            tj_special *sp, char *err);
void tj_free(tj_pipeline *tj);
/* The size of the pieces a normalizer runs over between stop checks, in
 * bytes (about 16 KB after tj_load; 0: the whole text at once). Each piece
 * ends where the step gives the same text cut or whole, so the size never
 * changes the ids: tests set it to 1 and compare. */
void tj_set_chunk(tj_pipeline *tj, size_t bytes);
/* A deep copy of src, whose vocabulary has n_pieces ids (the Unigram
 * scores' count); shares nothing with src. */
int tj_clone(const tj_pipeline *src, int n_pieces, tj_pipeline **out, char *err);
/* The ids of text (len bytes, any bytes) without special tokens, as
 * tokenizer_tokenize_stoppable (stop may be NULL); v is the vocabulary
 * tj_load made with tj. */
int tj_tokenize(const tj_pipeline *tj, const vocab *v, const char *text, size_t len, int *ids,
                int cap, int *n_total, int (*stop)(void *), void *user, char *err);
/* The model input for one sequence, as tokenizer_encode_stoppable: the
 * post-processor's ids around the text's, cut to max_length. */
int tj_encode(const tj_pipeline *tj, const vocab *v, const char *text, size_t len, int max_length,
              int *ids, int *n, int *truncated, int (*stop)(void *), void *user, char *err);
/* tj_encode that also writes, aligned with ids, each token's span in text
 * in characters (tokenizer_encode_offsets), 0, 0 for the ids the
 * post-processor adds. starts or ends NULL: tj_encode. */
int tj_encode_offsets(const tj_pipeline *tj, const vocab *voc, const char *text, size_t len,
                      int max_length, int *ids, int *starts, int *ends, int *n, int *truncated,
                      int (*stop)(void *), void *user, char *err);

#endif
