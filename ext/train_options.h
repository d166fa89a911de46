/* train_options.h: train()'s options (train_options.c), between train.c
 * and train_options.c only. The option reference is train_options.c's
 * header comment.
 */
#ifndef SX_TRAIN_OPTIONS_H
#define SX_TRAIN_OPTIONS_H

#include "ext/conn.h"
#include "train/trainer.h"

/* How train() names itself in its error messages. */
#define TRAIN_FN "train()"

/* The parsed options. Owns vocab_path and the label map (free with
 * sx_train_options_free). */
typedef struct sx_train_options {
    char base[SX_NAME_MAX + 32];
    int none; /* "base": "none" */
    trainer_options t;
    int max_length; /* 0: not given */
    int lr_given;
    float head_lr; /* 0: not given */
    bert_shape shape;
    int do_lower_case;
    char *vocab_path; /* sqlite3_malloc'd or NULL */
    int map_given;    /* option "labels" given ({} too) */
    int n_map;
    char **map_from, **map_to; /* data label -> model label (sqlite3_malloc'd) */
    int vocab_min_count, vocab_size;
    int wide;                /* option "wide": -1 not given, 0 false, 1 true or an object */
    sm_wide_config wide_cfg; /* its settings (sm_wide_config_default, then the object's) */
    double wide_l2;          /* its "l2"; 0: chosen on the validation rows */
    int int8_check;          /* option "int8_check": 1 (default) or 0 */
} sx_train_options;

/* Parses the options JSON (NULL: the defaults) into *o, which it clears
 * first. SQLITE_OK, or an error naming train() that says which option is
 * wrong and what it accepts; *o is then to be freed all the same. */
int sx_train_options_parse(const char *text, sx_train_options *o, char **errmsg);
/* Frees what *o owns (not o itself). */
void sx_train_options_free(sx_train_options *o);

#endif
