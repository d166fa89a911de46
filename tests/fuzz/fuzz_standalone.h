/* fuzz_standalone.h: a main() that replays files through
 * LLVMFuzzerTestOneInput, for builds without libFuzzer (-DFUZZ_STANDALONE;
 * scripts/fuzz.sh uses it for FUZZ_REPLAY and when clang is missing). Each
 * input is copied into a buffer of exactly its size so ASan sees any read
 * past the end. Included by each fuzz target after its entry point. */
#ifndef FUZZ_STANDALONE_H
#define FUZZ_STANDALONE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 1;
        }
        size_t cap = 1 << 16, len = 0, got;
        uint8_t *buf = malloc(cap);
        while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
            len += got;
            if (len == cap) {
                uint8_t *grown = realloc(buf, cap *= 2);
                if (!grown) free(buf);
                buf = grown;
            }
        }
        fclose(f);
        uint8_t *exact = malloc(len ? len : 1);
        if (!buf || !exact) {
            fprintf(stderr, "%s: out of memory\n", argv[i]);
            free(buf);
            free(exact);
            return 1;
        }
        memcpy(exact, buf, len);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
        free(buf);
    }
    printf("ran %d inputs\n", argc - 1);
    return 0;
}

#endif
