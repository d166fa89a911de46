/* fuzz_pooling.c: libFuzzer target for the sentence-transformers pooling
 * files (model/format/pooling.c): the input is parsed as modules.json, as
 * 1_Pooling/config.json and as config.json's "embedding_pooling" value.
 * An accepted modules.json names a plain directory for the Pooling module;
 * an accepted pooling config writes back out (sm_pooling_files) and parses
 * again to the same setting; a refusal always says why. Built by
 * scripts/fuzz.sh; with -DFUZZ_STANDALONE it is a plain program that runs
 * the files named on its command line.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "format/pooling.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    char err[SM_ERR_MAX], path[80];
    int normalize = -1;

    err[0] = 0;
    if (sm_pooling_parse_modules(text, size, path, sizeof path, &normalize, err) == SM_OK) {
        if (!path[0] || strchr(path, '/') || !strcmp(path, "..") ||
            (normalize != 0 && normalize != 1))
            __builtin_trap();
    } else if (!err[0]) {
        __builtin_trap();
    }

    sm_pooling p, q;
    sm_pooling_default(&p);
    err[0] = 0;
    if (sm_pooling_parse_config(text, size, "1_Pooling/config.json", &p, err) == SM_OK) {
        char *mj = NULL, *pj = NULL;
        if (p.mode != SM_POOL_MEAN && p.mode != SM_POOL_CLS) __builtin_trap();
        p.normalize = 1;
        if (sm_pooling_files(&p, p.dim ? p.dim : 8, &mj, &pj, err) != SM_OK) __builtin_trap();
        sm_pooling_default(&q);
        if (sm_pooling_parse_modules(mj, strlen(mj), path, sizeof path, &normalize, err) ||
            normalize != 1 || sm_pooling_parse_config(pj, strlen(pj), "x", &q, err) ||
            q.mode != p.mode)
            __builtin_trap();
        free(mj);
        free(pj);
    } else if (!err[0]) {
        __builtin_trap();
    }

    json_in_doc *doc = NULL;
    json_in_error je;
    if (json_in_parse(text, size, &doc, &je) == SM_OK) {
        err[0] = 0;
        if (sm_pooling_from_json(json_in_root(doc), &q, err) == SM_OK) {
            if (!q.set || (q.mode != SM_POOL_MEAN && q.mode != SM_POOL_CLS)) __builtin_trap();
        } else if (!err[0]) {
            __builtin_trap();
        }
        json_in_free(doc);
    }
    return 0;
}

#ifdef FUZZ_STANDALONE
#include "fuzz_standalone.h"
#endif
