/* vocab_builder.h: a WordPiece vocabulary built from training texts, for
 * models trained from scratch ("base": "none").
 *
 * Texts are split the way BertTokenizer's basic tokenizer splits them
 * (whitespace, every CJK ideograph alone, punctuation alone, optional
 * lower-casing and accent stripping) and counted. The vocabulary is, in
 * order: [PAD] [UNK] [CLS] [SEP] [MASK]; every character seen at least
 * min_count times; its "##" continuation form when it was seen inside a
 * longer word; then whole words of two or more characters seen at least
 * min_count times, most frequent first, up to max_size entries. Ties break
 * by byte order, so the result depends only on the multiset of texts, not
 * on their order. Any word made of kept characters tokenizes without [UNK].
 */
#ifndef SM_VOCAB_BUILDER_H
#define SM_VOCAB_BUILDER_H

#include <stddef.h>

typedef struct vocab_builder vocab_builder;

int vocab_builder_create(int do_lower_case, vocab_builder **out, char *err);
void vocab_builder_free(vocab_builder *vb);
/* Counts the words of one text (len bytes, any bytes; invalid UTF-8 is
 * skipped). */
int vocab_builder_add(vocab_builder *vb, const char *text, size_t len, char *err);
/* Writes vocab.txt text (one token per line, malloc'd, NUL-terminated) and
 * the token count. min_count >= 1; max_size >= 5 (0: no limit). */
int vocab_builder_build(const vocab_builder *vb, int min_count, int max_size, char **vocab,
                        size_t *len, int *n_tokens, char *err);

#endif
