/* tokenizer_json.h: the seam between tokenizer.c (the vocabulary, the
 * public tokenizer type) and tokenizer_json.c (the tokenizer.json pipeline).
 * Internal to model/: callers use tokenizer.h only.
 */
#ifndef SM_TOKENIZER_JSON_H
#define SM_TOKENIZER_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

typedef struct tj_pipeline tj_pipeline;

/* tokenizer.c: a tokenizer whose vocabulary is pieces[0..n) (id = index,
 * each copied); a duplicate piece is an error. No special ids are set. */
int tokenizer_new_from_pieces(const char *const *pieces, int n,
                              tokenizer **out, char *err);
/* tokenizer.c: hands tj to tok (freed with it) and sets its special ids. */
void tokenizer_attach_json(tokenizer *tok, tj_pipeline *tj, int cls, int sep,
                           int pad, int unk, int mask);
size_t tokenizer_max_token_bytes(const tokenizer *tok);
/* tokenizer.c: one code point of s[0..n) (n >= 1), invalid UTF-8 repaired as
 * Python's errors="replace" does; returns the bytes consumed. */
size_t tokenizer_utf8_next(const unsigned char *s, size_t n, int32_t *out);

/* tokenizer_json.c */
void tj_free(tj_pipeline *tj);
/* A deep copy of src, whose tokenizer has n_pieces ids (the Unigram
 * scores' count); shares nothing with src. */
int tj_clone(const tj_pipeline *src, int n_pieces, tj_pipeline **out, char *err);
int tj_tokenize(const tj_pipeline *tj, const tokenizer *tok, const char *text,
                size_t len, int *ids, int cap, int *n_total, char *err);
int tj_encode(const tj_pipeline *tj, const tokenizer *tok, const char *text,
              size_t len, int max_length, int *ids, int *n, int *truncated,
              char *err);

#endif
