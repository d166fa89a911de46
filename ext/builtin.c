/* builtin.c: the built-in model, embedded into sentiment.so when the build
 * has one.
 *
 * When model/builtin/ holds config.json, vocab.txt and model.safetensors,
 * their bytes are assembled into .rodata with the assembler's .incbin and
 * `default` resolves to them; with none of them present, sx_builtin_get()
 * returns 0 and `default` asks the user to register a model. Dropping the
 * three files into model/builtin/ and rebuilding ext/builtin.o is all it
 * takes (the paths are relative to the repository root, where make runs).
 */
#include "ext/builtin.h"

#if defined(__has_include)
#if __has_include("../model/builtin/config.json") &&             \
                  __has_include("../model/builtin/vocab.txt") && \
                                __has_include("../model/builtin/model.safetensors")
#define SX_HAVE_BUILTIN 1
#endif
#endif

#ifdef SX_HAVE_BUILTIN

/* NOLINTBEGIN(bugprone-macro-parentheses): sym is a name being declared */
#define SX_INCBIN(sym, file)                                       \
    __asm__(".pushsection .rodata\n"                               \
            ".balign 64\n"                                         \
            ".hidden " #sym "\n"                                   \
            ".globl " #sym "\n" #sym ":\n"                         \
            ".incbin \"" file "\"\n"                               \
            ".hidden " #sym "_end\n"                               \
            ".globl " #sym "_end\n" #sym "_end:\n"                 \
            ".byte 0\n"                                            \
            ".popsection\n");                                      \
    extern const char sym[] __attribute__((visibility("hidden"))); \
    extern const char sym##_end[] __attribute__((visibility("hidden")))
/* NOLINTEND(bugprone-macro-parentheses) */

SX_INCBIN(sx_builtin_config, "model/builtin/config.json");
SX_INCBIN(sx_builtin_vocab, "model/builtin/vocab.txt");
SX_INCBIN(sx_builtin_weights, "model/builtin/model.safetensors");

int sx_builtin_get(sx_builtin *b)
{
    b->config = sx_builtin_config;
    b->config_len = (size_t)(sx_builtin_config_end - sx_builtin_config);
    b->vocab = sx_builtin_vocab;
    b->vocab_len = (size_t)(sx_builtin_vocab_end - sx_builtin_vocab);
    b->weights = sx_builtin_weights;
    b->weights_len = (size_t)(sx_builtin_weights_end - sx_builtin_weights);
    return 1;
}

#else

int sx_builtin_get(sx_builtin *b)
{
    b->config = b->vocab = NULL;
    b->weights = NULL;
    b->config_len = b->vocab_len = b->weights_len = 0;
    return 0;
}

#endif
