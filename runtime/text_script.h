/* text_script.h: which script a text is written in, as much as the engine
 * needs to know (runtime/text_script.c). Room: runtime/; called by
 * runtime/engine.c.
 */
#ifndef RUNTIME_TEXT_SCRIPT_H
#define RUNTIME_TEXT_SCRIPT_H

#include <stddef.h>

/* 1 when fewer than half of the text's letters (Unicode categories L*) are
 * Han ideographs: English, Russian, Japanese kana ... Texts without letters
 * (digits, emoji, punctuation) give 0. Only the first 4096 letters are
 * looked at (more than a model reads), so the cost is bounded whatever the
 * text's size; invalid UTF-8 bytes are not letters. */
int rt_text_not_chinese(const char *text, size_t len);

#endif
