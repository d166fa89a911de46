/* utf8.h: one code point decoded from UTF-8 the way Python's
 * bytes.decode("utf-8", errors="replace") does, which is how transformers
 * sees bytes that are not valid UTF-8.
 *
 * And byte offsets to characters as SQLite counts them, for the token
 * offsets. Owns nothing and calls nothing. Header-only (static inline) because the
 * tokenizers' inner loops run it once per code point: vocab.c (checking
 * vocab.txt lines), tokenizer.c (the WordPiece pipeline) and
 * tokenizer_json.c (the tokenizer.json pipeline) include it. Internal to
 * model/.
 */
#ifndef SM_UTF8_H
#define SM_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point from s[0..n) (n >= 1) into *out: an invalid or
 * truncated sequence becomes one U+FFFD per maximal subpart, and the byte
 * that breaks a sequence is not consumed. Returns the number of bytes
 * consumed (1..4). */
static inline size_t utf8_next(const unsigned char *s, size_t n, int32_t *out)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    int32_t v;

    if (c < 0x80) {
        *out = (int32_t)c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        *out = 0xFFFD;
        return 1;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n || s[i] < lo || s[i] > hi) {
            *out = 0xFFFD;
            return i;
        }
        v = (v << 6) | (s[i] & 0x3F);
        lo = 0x80;
        hi = 0xBF;
    }
    *out = v;
    return need + 1;
}

/* Byte offsets in s[0..len) to characters as SQLite counts them
 * (length(), substr()): a byte 0xC0..0xFF and the continuation bytes
 * (0x80..0xBF) after it are one character, every other byte is one; for
 * valid UTF-8, one per code point. Each off[0..n) is the start of a code
 * point utf8_next decodes (never inside a character counted so) or -1,
 * which becomes 0; is_end adds one (the offset is the last code point's,
 * the end is after it). A cursor walks forward: the offsets mostly grow,
 * one that goes back starts it over. */
static inline void utf8_offsets_to_chars(const unsigned char *s, size_t len, int *off, int n,
                                         int is_end)
{
    size_t p = 0; /* the character that starts at byte p */
    int idx = 0;  /* is character idx */
    for (int i = 0; i < n; i++) {
        if (off[i] < 0) {
            off[i] = 0;
            continue;
        }
        size_t b = (size_t)off[i];
        if (b < p) {
            p = 0;
            idx = 0;
        }
        for (;;) {
            size_t q = p + 1;
            if (s[p] >= 0xC0)
                while (q < len && (s[q] & 0xC0) == 0x80) q++;
            if (q > b || q >= len) break;
            p = q;
            idx++;
        }
        off[i] = idx + (is_end != 0);
    }
}

#endif
