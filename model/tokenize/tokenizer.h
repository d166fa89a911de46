/* tokenizer.h: Hugging Face BertTokenizer, exactly, in C.
 *
 * Text -> basic tokenizer (clean text, pad CJK ideographs, optional lower-case
 * + NFD accent stripping, punctuation split) -> greedy longest-match WordPiece
 * with "##" continuation, [UNK] for a word that cannot be split or is longer
 * than 100 code points. Invalid UTF-8 is repaired to U+FFFD (which the clean
 * step then drops, as HF does for decoded-with-replace text); never fatal.
 * Special token ids ([CLS], [SEP], [PAD], [UNK], [MASK]) are looked up in the
 * vocabulary, never hard-coded. A tokenizer is immutable after loading and may
 * be shared by threads.
 */
#ifndef SM_TOKENIZER_H
#define SM_TOKENIZER_H

#include <stddef.h>

typedef struct tokenizer tokenizer;

/* Loads vocab.txt content (one token per line, id = line number, "\n" or
 * "\r\n"). The buffer is copied. Fails when [CLS], [SEP], [PAD] or [UNK] is
 * missing. */
int tokenizer_load_buffer(const char *vocab, size_t len, int do_lower_case, tokenizer **out,
                          char *err);
int tokenizer_load_file(const char *path, int do_lower_case, tokenizer **out, char *err);
/* Loads a Hugging Face tokenizer.json (len bytes; copied as needed) into the
 * same tokenizer type, so tokenizer_tokenize / tokenizer_encode and the id
 * and token look-ups work unchanged; see tokenizer_json.c for what is
 * supported. Anything else in the file is an SM_ERR_UNSUPPORTED error that
 * names the component ("tokenizer.json: normalizer 'Prepend' is not
 * supported"); a malformed file is SM_ERR_FORMAT. The file is read through
 * file_read.h (regular file, at most SM_FILE_MAX_VOCAB). For such a
 * tokenizer tokenizer_cls_id / tokenizer_sep_id are the first ids the
 * post-processor puts before / after the text (-1 when none),
 * tokenizer_unk_id is the model's unknown id, tokenizer_pad_id and
 * tokenizer_mask_id are "<pad>"/"[PAD]" and "<mask>"/"[MASK]" when present
 * (else -1), and tokenizer_do_lower_case is 0. */
int tokenizer_load_json_buffer(const char *json, size_t len, tokenizer **out, char *err);
int tokenizer_load_json_file(const char *path, tokenizer **out, char *err);
/* The same with flags. TOKENIZER_JSON_RUST_SCORES: read Unigram scores as
 * the Rust tokenizers library does when it parses the file (serde_json's
 * fast float reading, which can be one unit in the last place off for
 * 16-17 digit scores) instead of correctly rounded as transformers 5's
 * XLMRobertaTokenizerFast reads them. The two differ only where two
 * segmentations tie exactly (a run of one repeated character, say): 7 of
 * the 1,337 golden strings. */
#define TOKENIZER_JSON_RUST_SCORES 1
int tokenizer_load_json_buffer_flags(const char *json, size_t len, int flags, tokenizer **out,
                                     char *err);
int tokenizer_load_json_file_flags(const char *path, int flags, tokenizer **out, char *err);
void tokenizer_free(tokenizer *tok);
/* A copy of src (WordPiece or tokenizer.json) that shares no memory with
 * it and tokenizes exactly as it does. */
int tokenizer_clone(const tokenizer *src, tokenizer **out, char *err);

int tokenizer_vocab_size(const tokenizer *tok);
int tokenizer_do_lower_case(const tokenizer *tok);
/* Token text for an id, or NULL when out of range. */
const char *tokenizer_token(const tokenizer *tok, int id);
/* Id of an exact token string, or -1. */
int tokenizer_lookup(const tokenizer *tok, const char *token, size_t len);

int tokenizer_cls_id(const tokenizer *tok);
int tokenizer_sep_id(const tokenizer *tok);
int tokenizer_pad_id(const tokenizer *tok);
int tokenizer_unk_id(const tokenizer *tok);
int tokenizer_mask_id(const tokenizer *tok); /* -1 if the vocab has none */

/* WordPiece ids of `text` (len bytes, any bytes) without special tokens.
 * Writes at most `cap` ids to `ids` (ids may be NULL when cap is 0) and sets
 * *n_total to the full count, so a caller can size a buffer or detect
 * truncation. */
int tokenizer_tokenize(const tokenizer *tok, const char *text, size_t len, int *ids, int cap,
                       int *n_total, char *err);

/* tokenizer_tokenize and tokenizer_encode (below) for long texts: stop
 * (may be NULL) is called with user after about every TOKENIZER_POLL_BYTES
 * bytes of work on the text, and when it answers non-zero the call ends
 * with SM_ERR_INTERRUPTED and err "interrupted" (*n_total / *n then say
 * nothing). Without a stop the calls are the plain ones. The cost of a
 * call is linear in the text: each place in it costs at most the longest
 * vocabulary piece's length in steps (tokenizer.json pieces are at most
 * 1024 bytes, longer ones are refused at load; a vocab.txt word is at most
 * 100 code points). */
#define TOKENIZER_POLL_BYTES 4096
int tokenizer_tokenize_stoppable(const tokenizer *tok, const char *text, size_t len, int *ids,
                                 int cap, int *n_total, int (*stop)(void *user), void *user,
                                 char *err);
int tokenizer_encode_stoppable(const tokenizer *tok, const char *text, size_t len, int max_length,
                               int *ids, int *n, int *truncated, int (*stop)(void *user),
                               void *user, char *err);

/* 1 when text (len bytes, any bytes) tokenizes to nothing with any
 * vocabulary: every code point is one the clean step drops (NUL and other
 * controls, format characters such as U+200B and U+FEFF, unassigned and
 * private-use code points, U+FFFD, which invalid UTF-8 becomes) or white
 * space, or belongs to a word made only of nonspacing marks (Mn), which the
 * accent strip of a lower-casing tokenizer removes (a cased one would make
 * [UNK] of such a word; it counts as blank all the same). Stops at the first
 * character that makes a token, so it costs little on ordinary text. */
int tokenizer_text_blank(const char *text, size_t len);

/* The model input for one sequence: [CLS] tokens [SEP], with the tokens cut
 * to max_length - 2 (HF truncation=True, "longest_first" on one sequence).
 * `ids` must hold max_length ints (max_length >= 2). Sets *n to the number of
 * ids written and *truncated to 1 when tokens were dropped. */
int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int max_length, int *ids,
                     int *n, int *truncated, char *err);

/* tokenizer_encode_stoppable (the same ids, truncation, framing and stop)
 * that also writes, aligned with ids (max_length entries each), each
 * token's span in the text as given: starts[i] and ends[i] in characters
 * (end exclusive), what transformers' fast tokenizers return as
 * offset_mapping for the same Python string; [CLS], [SEP] and whatever
 * else the framing adds get 0, 0. The spans are tracked through the
 * pipeline (cleaning, ideograph spacing, lower-casing and accent
 * stripping, NFC/NFKC, charsmaps, pre-tokenizers, the model): each
 * normalised code point keeps the character it came from, and a token
 * spans from its first code point's character to its last one's, so a
 * token from a ligature or a full-width digit pair covers what it came
 * from, and tokens may share a character (XLM-R's "▁" and the letter
 * after it).
 *
 * A character is counted as SQLite's length() and substr() count them,
 * so that substr(text, start + 1, end - start) is the token's text: for
 * valid UTF-8 a character is a code point; in invalid UTF-8 a byte
 * 0xC0..0xFF together with the continuation bytes (0x80..0xBF) that
 * follow it is one character, and every other byte (ASCII, a stray
 * continuation byte) is one. (The tokenizers repair invalid UTF-8 to
 * U+FFFD per maximal invalid subpart first; a token never starts or ends
 * inside a character counted so.) substr() stops at a NUL byte, these
 * offsets count it as one character. starts or ends NULL: the same as
 * tokenizer_encode_stoppable. Keeping the offsets costs a little more
 * than encoding: an offset per code point through the steps. */
int tokenizer_encode_offsets(const tokenizer *tok, const char *text, size_t len, int max_length,
                             int *ids, int *starts, int *ends, int *n, int *truncated,
                             int (*stop)(void *user), void *user, char *err);

#endif
