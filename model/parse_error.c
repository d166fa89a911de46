/* parse_error.c: messages for bytes that failed to parse, which give a
 * position and what was expected, never the bytes (see parse_error.h). */
#include "parse_error.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"

int sm_parse_error(char *err, int code, const char *what, const char *text, size_t len,
                   size_t offset, const char *expected)
{
    size_t line = 1, col = 1;
    if (offset > len) offset = len;
    for (size_t i = 0; text && i < offset; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return sm_error(err, code, "%s (line %zu, column %zu, byte %zu): %s", what, line, col, offset,
                    expected);
}

/* 1 when jansson's message (its " near ..." context already cut) is one of
 * its fixed descriptions: every quoted span is a single JSON punctuation
 * character ('[' or '{' expected) and no byte value is printed. */
static int fixed_description(const char *s)
{
    if (strstr(s, "0x") || strstr(s, "\\u")) return 0;
    for (const char *p = s; *p; p++) {
        if (*p != '\'') continue;
        if (!p[1] || !strchr("[]{}:,", p[1]) || p[2] != '\'') return 0;
        p += 2;
    }
    return 1;
}

static const char *kind_description(enum json_error_code code)
{
    switch (code) {
    case json_error_out_of_memory: return "out of memory";
    case json_error_stack_overflow: return "objects and arrays nested too deep";
    case json_error_invalid_utf8: return "invalid UTF-8; expected UTF-8 text";
    case json_error_premature_end_of_input: return "the text ends inside a JSON value";
    case json_error_end_of_input_expected: return "expected the end of the text after the JSON value";
    case json_error_null_character: return "a NUL character; not allowed in JSON text";
    case json_error_null_byte_in_key: return "a NUL byte in an object key";
    case json_error_duplicate_key: return "a duplicate object key";
    case json_error_numeric_overflow: return "a number out of range";
    case json_error_invalid_syntax: return "invalid JSON syntax";
    default: return "not JSON";
    }
}

int sm_json_parse_error(char *err, const char *what, const struct json_error_t *jerr)
{
    char desc[JSON_ERROR_TEXT_LENGTH];
    enum json_error_code code = json_error_code(jerr);
    char *near;

    int line = jerr->line, column = jerr->column, position = jerr->position;

    snprintf(desc, sizeof desc, "%s", jerr->text);
    if (code == json_error_duplicate_key) {
        /* the text before it parsed as a JSON object: the key is named
         * (printable ASCII of at most 20 bytes, as jansson quotes it) */
        const char *k = strstr(jerr->text, " near '\"");
        size_t n = k ? strlen(k + 8) : 0;
        int ok = k && n >= 2 && n <= 22 && !strcmp(k + 8 + n - 2, "\"'");
        for (size_t i = 0; ok && i + 2 < n; i++)
            if (k[8 + i] < 0x20 || k[8 + i] > 0x7e || k[8 + i] == '"' || k[8 + i] == '\\') ok = 0;
        if (ok)
            snprintf(desc, sizeof desc, "duplicate object key \"%.*s\"", (int)(n - 2), k + 8);
        else
            snprintf(desc, sizeof desc, "%s", kind_description(code));
        return sm_error(err, SM_ERR_FORMAT, "%s (line %d, column %d, byte %d): %s", what,
                        jerr->line, jerr->column, jerr->position, desc);
    }
    if ((near = strstr(desc, " near "))) {
        /* jansson's position is after the token it quotes: step back over
         * it (its length only) so the position is where the token starts */
        size_t n = strlen(near);
        if (!strncmp(near, " near '", 7) && n > 8 && near[n - 1] == '\'') {
            const char *tok = near + 7, *end = near + n - 1;
            int chars = 0, newline = 0;
            for (const char *q = tok; q < end; q++) {
                if (((unsigned char)*q & 0xC0) != 0x80) chars++;
                if (*q == '\n') newline = 1;
            }
            if ((int)(end - tok) <= position) position -= (int)(end - tok);
            if (!newline && chars <= column) column -= chars;
        }
        *near = '\0';
    }
    column++; /* jansson counts the characters read; say the next one's */
    if (!desc[0] || !fixed_description(desc))
        snprintf(desc, sizeof desc, "%s", kind_description(code));
    return sm_error(err, code == json_error_out_of_memory ? SM_ERR_NOMEM : SM_ERR_FORMAT,
                    "%s (line %d, column %d, byte %d): %s", what, line, column, position, desc);
}
