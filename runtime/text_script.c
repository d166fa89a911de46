/* text_script.c: is a text mostly not Chinese? (rt_text_not_chinese,
 * runtime/text_script.h). Counted by runtime/engine.c for every text it
 * runs (sentiment_debug's connection.not_chinese). Room: runtime/; needs
 * utf8proc only.
 */
#include <utf8proc.h>

#include "runtime/text_script.h"

/* Han (Chinese) ideographs: the CJK Unified Ideographs blocks and their
 * extensions, the compatibility ideographs and the ideographic number zero. */
static int is_han(utf8proc_int32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x323AF) || (cp >= 0xF900 && cp <= 0xFAFF) || cp == 0x3007;
}

/* Letters looked at: the model reads at most max_length tokens, and the
 * cost stays bounded for a text of any size. */
#define RT_SCRIPT_LETTERS 4096

int rt_text_not_chinese(const char *text, size_t len)
{
    size_t i = 0, letters = 0, han = 0;
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i,
                                              (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0) { /* an invalid byte: not a letter */
            i++;
            continue;
        }
        i += (size_t)k;
        utf8proc_category_t cat = utf8proc_category(cp);
        if (cat < UTF8PROC_CATEGORY_LU || cat > UTF8PROC_CATEGORY_LO) continue;
        letters++;
        han += is_han(cp);
        if (letters == RT_SCRIPT_LETTERS) break; /* the part the model reads, and a bound */
    }
    return letters > 0 && 2 * han < letters;
}
