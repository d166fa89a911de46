/* vocab.h: a vocabulary, the part both tokenizers share: token strings by
 * id and the table from token bytes to id. tokenizer.c (vocab.txt,
 * WordPiece) and tokenizer_json.c (a tokenizer.json model's pieces) each
 * build one and look tokens up in it; neither knows how it is stored.
 * Immutable after it is made, so threads may share one. Internal to
 * model/: callers use tokenizer.h.
 */
#ifndef SM_VOCAB_H
#define SM_VOCAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct vocab vocab;

/* A vocabulary from vocab.txt content, len bytes (copied): one token per
 * line, id = line number; lines end at "\n", "\r\n" or a lone "\r"
 * (Python's universal newlines, as transformers' load_vocab() reads the
 * file), a final line without an end counts. A token that appears twice
 * maps to its last id, as the Python dict does. A line that is not valid
 * UTF-8 or a NUL byte anywhere is SM_ERR_FORMAT. */
int vocab_from_lines(const char *text, size_t len, vocab **out, char *err);
/* A vocabulary whose token i is pieces[i] (a NUL-terminated string,
 * copied), i in 0..n. A duplicate piece is SM_ERR_FORMAT naming both ids. */
int vocab_from_pieces(const char *const *pieces, int n, vocab **out, char *err);
/* A copy of src that shares no memory with it. */
int vocab_clone(const vocab *src, vocab **out, char *err);
void vocab_free(vocab *v);

/* The number of ids. */
int vocab_size(const vocab *v);
/* The longest token's length in bytes: no longer string can match. */
size_t vocab_max_token_bytes(const vocab *v);
/* The token of an id (NUL-terminated), or NULL when id is out of range. */
const char *vocab_token(const vocab *v, int id);
/* The id of the token s[0..n) (any bytes), or -1. */
int vocab_lookup(const vocab *v, const char *s, size_t n);
/* The id of the token prefix[0..plen) followed by s[0..n) ("##" and a
 * word's rest, say) without joining them first, or -1. */
int vocab_lookup_prefixed(const vocab *v, const char *prefix, size_t plen, const char *s, size_t n);
/* The trie of the tokens' bytes, for walks that find every token starting
 * at a place in a text in one pass (Unigram) or the longest (WordPiece),
 * at a cost of one step per byte walked, however long the tokens are.
 * Node 0 is the root (the empty string). vocab_trie_next gives the child
 * of node along byte b, or 0 when no token has that prefix (the walk
 * ends); vocab_trie_id the id of the token that is exactly the string of
 * node (what vocab_lookup gives for it), or -1. */
uint32_t vocab_trie_next(const vocab *v, uint32_t node, unsigned char b);
int vocab_trie_id(const vocab *v, uint32_t node);

#endif
