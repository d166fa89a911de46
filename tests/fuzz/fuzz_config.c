/* fuzz_config.c: libFuzzer target for the config.json parser.
 *
 * Parses the input as config.json; when it is accepted, the config must
 * write back out, parse again to the same values, and find each of its own
 * labels. Built by scripts/fuzz.sh; with -DFUZZ_STANDALONE it is a plain
 * program that runs the files named on its command line.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "format/config.h"

static int same(const bert_config *a, const bert_config *b)
{
    if (strcmp(a->model_type, b->model_type) || a->vocab_size != b->vocab_size ||
        a->hidden_size != b->hidden_size ||
        a->num_hidden_layers != b->num_hidden_layers ||
        a->num_attention_heads != b->num_attention_heads ||
        a->intermediate_size != b->intermediate_size ||
        a->max_position_embeddings != b->max_position_embeddings ||
        a->type_vocab_size != b->type_vocab_size ||
        a->use_task_id != b->use_task_id ||
        a->task_type_vocab_size != b->task_type_vocab_size ||
        a->pad_token_id != b->pad_token_id ||
        a->position_offset != b->position_offset ||
        a->layer_norm_eps != b->layer_norm_eps ||
        a->hidden_dropout_prob != b->hidden_dropout_prob ||
        a->attention_probs_dropout_prob != b->attention_probs_dropout_prob ||
        a->classifier_dropout != b->classifier_dropout ||
        a->do_lower_case != b->do_lower_case ||
        a->num_labels != b->num_labels || a->pooling.set != b->pooling.set ||
        a->pooling.mode != b->pooling.mode || a->pooling.normalize != b->pooling.normalize)
        return 0;
    for (int i = 0; i < a->num_labels; i++)
        if (strcmp(a->id2label[i], b->id2label[i]))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bert_config cfg, back;
    char err[SM_ERR_MAX];
    char *text = NULL;
    if (bert_config_parse((const char *)data, size, &cfg, err) != SM_OK) {
        if (cfg.id2label || cfg.num_labels || !err[0])
            __builtin_trap(); /* a failure leaves cfg empty, with a message */
        bert_config_free(&cfg);
        return 0;
    }
    if (cfg.num_labels < 1 || cfg.num_labels > BERT_MAX_LABELS ||
        cfg.hidden_size % cfg.num_attention_heads != 0)
        __builtin_trap();
    for (int i = 0; i < cfg.num_labels; i++)
        if (bert_config_label_index(&cfg, cfg.id2label[i]) != i)
            __builtin_trap();
    if (bert_config_to_json(&cfg, &text, err) != SM_OK)
        __builtin_trap();
    if (bert_config_parse(text, strlen(text), &back, err) != SM_OK ||
        !same(&cfg, &back))
        __builtin_trap();
    free(text);
    bert_config_free(&back);
    bert_config_free(&cfg);
    bert_config_free(&cfg);
    return 0;
}

#ifdef FUZZ_STANDALONE
#include "fuzz_standalone.h"
#endif
