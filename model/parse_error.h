/* parse_error.h: the one rule for an error about bytes that failed to parse
 * (config.json, a safetensors header, a vocab file, the same stored as
 * BLOBs in a database): the message says where (line, column, byte offset)
 * and what was expected, and never quotes the bytes themselves. The bytes
 * may be any file a user can name (config.json linked to /etc/shadow), so
 * an error that echoes "near 'root'" would leak them. Lines and columns
 * count from 1, the byte offset from 0.
 */
#ifndef SM_PARSE_ERROR_H
#define SM_PARSE_ERROR_H

#include <stddef.h>

/* Formats "<what> (line L, column C, byte P): <expected>" into err, with L and
 * C (1-based, C counted in bytes) computed from offset into text[0..len), and
 * returns code. expected is our own text, never the input's. */
int sm_parse_error(char *err, int code, const char *what, const char *text, size_t len,
                   size_t offset, const char *expected);

/* The same for a jansson json_error_t: its position, and its description
 * only when that carries none of the input (the "near '...'" context and
 * messages that quote a byte or an escape are replaced by a description of
 * the error's kind). One exception: a duplicate object key is named, when
 * it is short printable ASCII, since everything before it parsed as a JSON
 * object. Returns SM_ERR_NOMEM when jansson ran out of memory, else
 * SM_ERR_FORMAT. */
struct json_error_t;
int sm_json_parse_error(char *err, const char *what, const struct json_error_t *jerr);

#endif
