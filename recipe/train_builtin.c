/* train_builtin.c: trains the built-in sentiment model from ../shared/data
 * with this project's own trainer, evaluates it on texts it never saw, and
 * writes the model directory that sentiment.so embeds.
 *
 *   make builtin-model                      (the shipped recipe: its options
 *                                            are in the Makefile)
 *   build/train_builtin --data ../shared/data --out model/builtin [options]
 *
 * Options and their defaults: --layers 6 --hidden 128
 * --heads 4 --intermediate 512 --max-length 128 --epochs 2 --lr 3e-4
 * --batch 32 --seed 42 --threads 0 (all cores) --min-count 3
 * --vocab-size 8000 --weibo 0|1 --limit N (first N training rows, and N unlabeled,
 * for quick trials) --dtype f16|bf16|f32 --split-dir DIR (also write the split as
 * TSV files, for the baseline in bench/baseline_svm.py, and the unlabeled
 * texts in the order used) --split-only 1
 * --zh 40000 (texts of unlabeled_zh/ added to the unlabeled ones, in a seeded
 * order; -1 all, 0 none)
 * --pretrain-epochs 3 (masked-LM pretraining on the training and unlabeled
 * texts first, 0 for none; the pretrained encoder is saved to
 * OUT/pretrained/ so a run can resume from it with --init OUT/pretrained
 * --pretrain-epochs 0) --pretrain-lr 1e-3; --epochs 0 stops after pretraining
 * --init DIR (start from a model directory instead of a fresh model; its
 * vocabulary is used).
 * Distillation: --soft model/builtin/teacher_soft.bin (the teacher's
 * probabilities, soft_labels.h; none: hard labels only) --alpha 0.5 (weight
 * of the soft term) --temperature 2 --unlabeled-soft -1 (unlabeled texts the
 * teacher labeled, trained on its probabilities alone; -1 all).
 * Weight averaging: --average-with DIR --average-weight W (after training,
 * every weight becomes (1 - W) * the trained model's + W * DIR's: a model of
 * the same shape and vocabulary, e.g. the version the training started
 * from; W 0: none).
 * Calibration: --calib-rows 2000 (the last training rows, held out; the
 * temperature that fits them best is folded into the classifier).
 * Wide part: --wide-buckets N (a hashed character n-gram part of N buckets,
 * fitted on the training rows and mixed with the encoder on the
 * calibration rows, which then replaces the temperature: recipe/wide_stage.h;
 * 0: none) --wide-ngram-max 3 --wide-l2 1e-5,3e-6,1e-6 (the penalties tried,
 * strongest first; the mixed log-loss on the calibration rows chooses)
 * --wide-stack A (fit it on top of A x the encoder's logits; 0: alone);
 * --ngram-teacher FOLDS (the n-gram model, out of fold over FOLDS folds of
 * the training rows, joins the teacher: each soft label becomes (1 - W) x
 * the teacher's + W x the n-gram model's; wide_stage_teacher)
 * --ngram-teacher-weight W (0.5) --ngram-teacher-l2 1e-6;
 * --wide-only 1 (with --init: the encoder as
 * it is, no pretraining or fine-tuning; only averaging and the wide stage).
 * With a wide part the encoder before the wide stage is also written, to
 * OUT/encoder/ (F32).
 * --soft-write TSV --soft OUT converts the teacher's `p<TAB>text` lines into
 * a soft labels file and exits (recipe/teacher.sh label).
 *
 * Output: config.json, vocab.txt, model.safetensors and metrics.json (split
 * sizes, per-epoch loss and validation accuracy, accuracy per evaluation
 * set, [UNK] rate, timings). The evaluation sets and how they are kept out of
 * training are described in reviews.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"
#include "format/model_dir.h"
#include "format/safetensors.h"
#include "recipe/reviews.h"
#include "recipe/soft_labels.h"
#include "recipe/wide_stage.h"
#include "tokenize/vocab_builder.h"
#include "train/bert_mlm.h"
#include "train/pretrain.h"
#include "train/trainer.h"

typedef struct recipe {
    const char *data, *out;
    bert_shape shape;
    int epochs, batch, threads, min_count, vocab_size, weibo, limit;
    float lr;
    unsigned long long seed;
    const char *dtype;
    int pretrain_epochs; /* masked-LM epochs before fine-tuning */
    float pretrain_lr;
    const char *init;         /* --init DIR: start from this model, not scratch */
    const char *split_dir;    /* --split-dir: also write the split as TSV files */
    int split_only;           /* --split-only 1: stop after writing them */
    int zh;                   /* --zh N: N texts of unlabeled_zh/ too (-1 all), drawn
                              in a seeded order (pretraining, vocabulary, distillation) */
    const char *soft;         /* --soft FILE: the teacher's soft labels (distillation) */
    const char *soft_write;   /* --soft-write TSV: convert TSV into --soft FILE, exit */
    float alpha, temperature; /* --alpha, --temperature: the distillation loss */
    int unlabeled_soft;       /* --unlabeled-soft N: unlabeled texts with soft labels (-1 all) */
    int calib_rows;           /* --calib-rows N: training rows held out to fit a temperature */
    const char *average_with; /* --average-with DIR: averaged with the trained weights */
    float average_weight;     /* --average-weight W: DIR's share (0: no averaging) */
    int wide_buckets;         /* --wide-buckets N: a wide part of N buckets (0: none) */
    int wide_ngram_max;       /* --wide-ngram-max N: its longest n-gram (3) */
    int wide_only;            /* --wide-only 1: no encoder training: --init's encoder as it is */
    double wide_l2[8];        /* --wide-l2 a,b,...: the penalties tried (1e-5,3e-6,1e-6) */
    int n_wide_l2;
    double wide_stack;  /* --wide-stack A: fitted on top of A x the encoder's logits (0) */
    int ngram_teacher;  /* --ngram-teacher FOLDS: the n-gram model joins the teacher (0) */
    float ngram_weight; /* --ngram-teacher-weight W: its share of the soft labels (0.5) */
    double ngram_l2;    /* --ngram-teacher-l2 (1e-6) */
} recipe;

static const char *const k_labels[2] = {"negative", "positive"};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_args(int argc, char **argv, recipe *r)
{
    *r = (recipe){"../shared/data",
                  "model/builtin",
                  {6, 128, 4, 512, 128},
                  2,
                  32,
                  0,
                  3,
                  8000,
                  0,
                  0,
                  3e-4f,
                  42,
                  "f16",
                  3,
                  1e-3f,
                  NULL,
                  NULL,
                  0,
                  40000,
                  "model/builtin/teacher_soft.bin",
                  NULL,
                  0.5f,
                  2.0f,
                  -1,
                  2000,
                  NULL,
                  0.0f,
                  0,
                  3,
                  0,
                  {1e-5, 3e-6, 1e-6},
                  3,
                  0,
                  0,
                  0.5f,
                  1e-6};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--data")) r->data = v;
        else if (!strcmp(k, "--out")) r->out = v;
        else if (!strcmp(k, "--layers")) r->shape.layers = atoi(v);
        else if (!strcmp(k, "--hidden")) r->shape.hidden = atoi(v);
        else if (!strcmp(k, "--heads")) r->shape.heads = atoi(v);
        else if (!strcmp(k, "--intermediate")) r->shape.intermediate = atoi(v);
        else if (!strcmp(k, "--max-length")) r->shape.max_length = atoi(v);
        else if (!strcmp(k, "--epochs")) r->epochs = atoi(v);
        else if (!strcmp(k, "--lr")) r->lr = strtof(v, NULL);
        else if (!strcmp(k, "--batch")) r->batch = atoi(v);
        else if (!strcmp(k, "--seed")) r->seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--threads")) r->threads = atoi(v);
        else if (!strcmp(k, "--min-count")) r->min_count = atoi(v);
        else if (!strcmp(k, "--vocab-size")) r->vocab_size = atoi(v);
        else if (!strcmp(k, "--weibo")) r->weibo = atoi(v);
        else if (!strcmp(k, "--limit")) r->limit = atoi(v);
        else if (!strcmp(k, "--dtype")) r->dtype = v;
        else if (!strcmp(k, "--split-dir")) r->split_dir = v;
        else if (!strcmp(k, "--pretrain-epochs")) r->pretrain_epochs = atoi(v);
        else if (!strcmp(k, "--pretrain-lr")) r->pretrain_lr = strtof(v, NULL);
        else if (!strcmp(k, "--init")) r->init = v;
        else if (!strcmp(k, "--split-only")) r->split_only = atoi(v);
        else if (!strcmp(k, "--zh")) r->zh = atoi(v);
        else if (!strcmp(k, "--soft")) r->soft = strcmp(v, "none") ? v : NULL;
        else if (!strcmp(k, "--soft-write")) r->soft_write = v;
        else if (!strcmp(k, "--alpha")) r->alpha = strtof(v, NULL);
        else if (!strcmp(k, "--temperature")) r->temperature = strtof(v, NULL);
        else if (!strcmp(k, "--unlabeled-soft")) r->unlabeled_soft = atoi(v);
        else if (!strcmp(k, "--calib-rows")) r->calib_rows = atoi(v);
        else if (!strcmp(k, "--average-with")) r->average_with = v;
        else if (!strcmp(k, "--average-weight")) r->average_weight = strtof(v, NULL);
        else if (!strcmp(k, "--wide-buckets")) r->wide_buckets = atoi(v);
        else if (!strcmp(k, "--wide-ngram-max")) r->wide_ngram_max = atoi(v);
        else if (!strcmp(k, "--wide-only")) r->wide_only = atoi(v);
        else if (!strcmp(k, "--wide-stack")) r->wide_stack = strtod(v, NULL);
        else if (!strcmp(k, "--ngram-teacher")) r->ngram_teacher = atoi(v);
        else if (!strcmp(k, "--ngram-teacher-weight")) r->ngram_weight = strtof(v, NULL);
        else if (!strcmp(k, "--ngram-teacher-l2")) r->ngram_l2 = strtod(v, NULL);
        else if (!strcmp(k, "--wide-l2")) {
            char *end = (char *)v;
            for (r->n_wide_l2 = 0; r->n_wide_l2 < 8 && *end;) {
                r->wide_l2[r->n_wide_l2++] = strtod(end, &end);
                if (*end == ',') end++;
            }
        } else {
            fprintf(stderr, "train_builtin: unknown option %s\n", k);
            return 1;
        }
    }
    if (argc % 2 == 0) {
        fprintf(stderr, "train_builtin: option %s needs a value\n", argv[argc - 1]);
        return 1;
    }
    return 0;
}

/* m's weights = (1 - w) * m's + w * those of the model in dir, which must
 * have m's shape and vocabulary (the same config and parameter count). */
static int average_with(bert_model *m, const char *dir, float w, char *err)
{
    bert_model *o = NULL;
    int rc = bert_model_load_dir(dir, &o, err);
    if (rc) return rc;
    if (o->n_floats != m->n_floats || o->cfg.vocab_size != m->cfg.vocab_size ||
        o->cfg.hidden_size != m->cfg.hidden_size ||
        o->cfg.num_hidden_layers != m->cfg.num_hidden_layers || !o->has_head ||
        o->cfg.num_labels != m->cfg.num_labels) {
        bert_model_free(o);
        return sm_error(err, SM_ERR_INVALID,
                        "--average-with %s: not a model of the same shape, "
                        "vocabulary and labels",
                        dir);
    }
    for (size_t i = 0; i < m->n_floats; i++)
        m->arena[i] = (float)((1.0 - w) * m->arena[i] + (double)w * o->arena[i]);
    bert_model_free(o);
    fprintf(stderr, "weights averaged with %s (its share %g)\n", dir, (double)w);
    return SM_OK;
}

static int progress(void *user, const trainer_progress *p)
{
    (void)user;
    if (p->loop.epoch_done)
        fprintf(stderr, "\nepoch %d/%d: train loss %.4f, validation accuracy %.4f\n", p->loop.epoch,
                p->loop.epochs, p->loop.epoch_loss, p->valid_accuracy);
    else if (p->loop.step % 20 == 0 || p->loop.step == p->loop.total_steps)
        fprintf(stderr, "\repoch %d/%d step %ld/%ld loss %.4f lr %.2e %.0f ex/s eta %.0f s   ",
                p->loop.epoch, p->loop.epochs, p->loop.step, p->loop.total_steps, p->loop.loss,
                p->loop.lr, p->loop.examples_per_sec, p->loop.eta_sec);
    return 0;
}

static int pretrain_progress_line(void *user, const pretrain_progress *p)
{
    (void)user;
    if (p->loop.epoch_done)
        fprintf(stderr, "\npretrain epoch %d/%d: loss %.4f, held-out loss %.4f\n", p->loop.epoch,
                p->loop.epochs, p->loop.epoch_loss, p->valid_loss);
    else if (p->loop.step % 20 == 0 || p->loop.step == p->loop.total_steps)
        fprintf(stderr, "\rpretrain %d/%d step %ld/%ld loss %.4f lr %.2e %.0f ex/s eta %.0f s   ",
                p->loop.epoch, p->loop.epochs, p->loop.step, p->loop.total_steps, p->loop.loss,
                p->loop.lr, p->loop.examples_per_sec, p->loop.eta_sec);
    return 0;
}

static int write_file(const char *dir, const char *name, const void *data, size_t len, char *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, len, f) == len;
    if (f && fclose(f)) ok = 0;
    if (!ok) return sm_error(err, SM_ERR_IO, "cannot write '%s'", path);
    return SM_OK;
}

/* Writes rows as `label<TAB>text` with a header, for baselines that must
 * see exactly the same split (bench/baseline_svm.py). */
static int write_split(const char *dir, const char *name, const review_set *set, int limit,
                       char *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return sm_error(err, SM_ERR_IO, "cannot write '%s'", path);
    fprintf(f, "label\ttext\n");
    for (int i = 0; i < set->n && (limit <= 0 || i < limit); i++)
        fprintf(f, "%d\t%s\n", set->rows[i].label, set->rows[i].text);
    return fclose(f) ? sm_error(err, SM_ERR_IO, "cannot write '%s'", path) : SM_OK;
}

/* The vocabulary of tok as vocab.txt text (one token per line), malloc'd. */
static int vocab_text(const tokenizer *tok, char **out, size_t *len, char *err)
{
    size_t cap = 1, used = 0;
    for (int i = 0; i < tokenizer_vocab_size(tok); i++) cap += strlen(tokenizer_token(tok, i)) + 1;
    char *text = malloc(cap);
    if (!text) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    text[0] = 0;
    for (int i = 0; i < tokenizer_vocab_size(tok); i++)
        used += (size_t)snprintf(text + used, cap - used, "%s\n", tokenizer_token(tok, i));
    *out = text;
    *len = used;
    return SM_OK;
}

/* The MLM head to pretrain with: the one stored in init (a checkpoint from an
 * earlier pretraining run, so a second run continues it), else a fresh one. */
static int mlm_head_for(const recipe *r, const bert_config *cfg, bert_mlm_head **head, char *err)
{
    *head = NULL;
    if (r->init) {
        model_dir md;
        int rc = model_dir_open(r->init, &md, err);
        if (!rc) rc = bert_mlm_head_from_safetensors(cfg, &md.st, head, err);
        model_dir_close(&md);
        if (rc) return rc;
        if (*head) {
            fprintf(stderr, "continuing the masked-LM head stored in %s\n", r->init);
            return SM_OK;
        }
    }
    return bert_mlm_head_create(cfg, r->seed, head, err);
}

/* Masked-LM pretraining of m on the training texts (labels unused) and the
 * unlabeled texts, then a checkpoint in OUT/pretrained/. */
static int pretrain(const recipe *r, const review_data *d, int n_train, bert_model *m, backend *be,
                    const char *vocab, char *err)
{
    pretrain_dataset *ds = NULL;
    bert_mlm_head *head = NULL;
    pretrain_result res = {0};
    void *bytes = NULL;
    char *config = NULL, dir[4096];
    size_t len;
    int rc = pretrain_dataset_create(m->cfg.vocab_size, &ds, err);
    for (int i = 0; i < n_train && !rc; i++)
        rc = pretrain_dataset_add_text(ds, m->tok, d->train.rows[i].text,
                                       strlen(d->train.rows[i].text), r->shape.max_length, err);
    int n_unlabeled = r->limit > 0 && r->limit < d->unlabeled.n ? r->limit : d->unlabeled.n;
    for (int i = 0; i < n_unlabeled && !rc; i++)
        rc = pretrain_dataset_add_text(ds, m->tok, d->unlabeled.rows[i].text,
                                       strlen(d->unlabeled.rows[i].text), r->shape.max_length, err);
    if (rc) goto end;
    fprintf(stderr, "pretraining on %d texts (%zu tokens)\n", pretrain_dataset_rows(ds),
            pretrain_dataset_tokens(ds));
    if ((rc = mlm_head_for(r, &m->cfg, &head, err))) goto end;
    pretrain_options o;
    pretrain_options_default(&o);
    o.loop.epochs = r->pretrain_epochs;
    o.loop.lr = r->pretrain_lr;
    o.loop.batch_size = r->batch;
    o.loop.max_length = r->shape.max_length;
    o.loop.valid_fraction = 0.01f;
    o.loop.seed = r->seed;
    o.progress = pretrain_progress_line;
    if ((rc = pretrain_run(m, head, be, ds, &o, &res, err))) goto end;
    fprintf(stderr, "pretrained in %.0f s (%.1f examples/s)\n", res.seconds, res.examples_per_sec);
    snprintf(dir, sizeof dir, "%s/pretrained", r->out);
    mkdir(r->out, 0755);
    mkdir(dir, 0755);
    if ((rc = pretrain_save_safetensors(m, head, ST_F32, &bytes, &len, err))) goto end;
    if ((rc = write_file(dir, "model.safetensors", bytes, len, err))) goto end;
    if ((rc = bert_config_to_json(&m->cfg, &config, err))) goto end;
    if ((rc = write_file(dir, "config.json", config, strlen(config), err))) goto end;
    rc = write_file(dir, "vocab.txt", vocab, strlen(vocab), err);
end:
    free(config);
    free(bytes);
    pretrain_result_free(&res);
    bert_mlm_head_free(head);
    pretrain_dataset_free(ds);
    return rc;
}

/* P(positive) of m for every text of set, into p1 (set->n). */
static int positive_probs(const bert_model *m, bert_workspace *ws, const review_set *set,
                          int max_length, float *p1, char *err)
{
    int K = m->cfg.num_labels, rc = SM_OK;
    const int chunk = 256;
    const char *texts[256];
    size_t lens[256];
    float *probs = malloc((size_t)chunk * K * sizeof *probs);
    if (!probs) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    for (int first = 0; first < set->n && !rc; first += chunk) {
        int n = set->n - first < chunk ? set->n - first : chunk;
        for (int i = 0; i < n; i++) {
            texts[i] = set->rows[first + i].text;
            lens[i] = strlen(texts[i]);
        }
        rc = bert_classify_texts(m, &m->p, ws, texts, lens, n, max_length, 32, probs, NULL, err);
        for (int i = 0; i < n && !rc; i++) p1[first + i] = probs[i * K + 1];
    }
    free(probs);
    return rc;
}

/* p1 scaled by temperature T: sigmoid(logit(p1) / T). */
static double tempered(double p1, double T)
{
    double p = p1 < 1e-7 ? 1e-7 : p1 > 1 - 1e-7 ? 1 - 1e-7 : p1;
    return 1 / (1 + exp(-log(p / (1 - p)) / T));
}

/* Accuracy and expected calibration error (10 equal-width bins of the top
 * label's probability) of p1 at temperature T against set's labels. */
static void score(const review_set *set, const float *p1, double T, double *accuracy, double *ece)
{
    double conf_sum[10] = {0}, right[10] = {0};
    int count[10] = {0}, correct = 0;
    for (int i = 0; i < set->n; i++) {
        double p = tempered(p1[i], T), conf = p > 0.5 ? p : 1 - p;
        int ok = (p > 0.5) == (set->rows[i].label == 1), bin = (int)(conf * 10);
        bin = bin > 9 ? 9 : bin;
        correct += ok;
        conf_sum[bin] += conf;
        right[bin] += ok;
        count[bin]++;
    }
    double e = 0;
    for (int b = 0; b < 10; b++) e += fabs(right[b] - conf_sum[b]);
    *accuracy = set->n ? (double)correct / set->n : NAN;
    *ece = set->n ? e / set->n : NAN;
}

/* The temperature (0.5..4 in steps of 0.01) that minimises the negative
 * log-likelihood of the calibration rows. */
static double fit_temperature(const review_set *set, const float *p1)
{
    double best_t = 1, best = INFINITY;
    for (int k = 50; k <= 400; k++) {
        double T = k / 100.0, nll = 0;
        for (int i = 0; i < set->n; i++) {
            double p = tempered(p1[i], T);
            nll -= log(set->rows[i].label == 1 ? p : 1 - p);
        }
        if (nll < best) best = nll, best_t = T;
    }
    return best_t;
}

/* Share of word pieces that are [UNK] over a set's texts. */
static double unk_rate(const tokenizer *tok, const review_set *set)
{
    long unk = 0, total = 0;
    int ids[4096];
    for (int i = 0; i < set->n; i++) {
        int n;
        if (tokenizer_tokenize(tok, set->rows[i].text, strlen(set->rows[i].text), ids, 4096, &n,
                               NULL))
            continue;
        for (int k = 0; k < n && k < 4096; k++) unk += ids[k] == tokenizer_unk_id(tok);
        total += n < 4096 ? n : 4096;
    }
    return total ? (double)unk / total : 0.0;
}

/* ---- the recipe's stages ------------------------------------------------ */

/* One run of the recipe: what its stages make and read; freed in one
 * place (run_free). */
typedef struct run {
    recipe r;
    review_data d;
    int n_train;        /* training rows used (--limit) */
    int n_calib, n_fit; /* of those, held out for calibration, and fitted */
    char *vocab;        /* vocab.txt text (malloc'd) */
    size_t vocab_len;
    int n_tokens;
    vocab_builder *vb;
    bert_model *m;
    backend *be;
    train_dataset *ds;
    soft_labels soft;
    int n_unlabeled_soft; /* unlabeled texts trained on the teacher's labels */
    trainer_result res;
    bert_workspace *ws;
    wide_stage_report wrep;
    double T; /* the calibration temperature */
    double acc[REVIEW_EVAL_SETS], ece[REVIEW_EVAL_SETS], ece_t[REVIEW_EVAL_SETS];
    double acc_enc[REVIEW_EVAL_SETS], acc_wide[REVIEW_EVAL_SETS]; /* with a wide part */
    double unk;    /* [UNK] rate on the first evaluation set */
    char *config;  /* the written config.json (malloc'd) */
    void *weights; /* the written model.safetensors (malloc'd) */
    size_t weights_len;
    double t0;
} run;

static void run_free(run *u)
{
    free(u->weights);
    free(u->config);
    trainer_result_free(&u->res);
    soft_labels_free(&u->soft);
    bert_workspace_free(u->ws);
    if (u->be) u->be->destroy(u->be);
    train_dataset_free(u->ds);
    bert_model_free(u->m);
    free(u->vocab);
    vocab_builder_free(u->vb);
    reviews_free(&u->d);
}

/* --soft-write: the teacher's TSV into the committed soft labels file. */
static int write_soft_labels(const recipe *r, char *err)
{
    int n, rc;
    if ((rc = soft_labels_write_tsv(r->soft_write, r->soft, &n, err))) return rc;
    fprintf(stderr, "wrote %d soft labels to %s\n", n, r->soft);
    return SM_OK;
}

/* The data (reviews.c), its counts on stderr. */
static int load_data(run *u, char *err)
{
    review_data *d = &u->d;
    int rc = reviews_load(u->r.data, u->r.weibo, u->r.zh != 0, d, err);
    if (rc) return rc;
    fprintf(stderr,
            "train %d rows (dropped: %d equal to an evaluation text, %d duplicates, "
            "%d conflicting), unlabeled %d\n",
            d->train.n, d->dropped_eval_overlap, d->dropped_duplicates, d->dropped_conflicts,
            d->unlabeled.n);
    for (int e = 0; e < REVIEW_EVAL_SETS; e++)
        fprintf(stderr, "eval  %-40s %5d rows\n", d->eval_name[e], d->eval[e].n);
    return SM_OK;
}

/* The training rows shuffled (seeded) so that --limit takes a fair sample
 * of every set, unlabeled_zh's texts too (the reviews stay first), cut to
 * --zh of them; n_train. */
static void shuffle_rows(run *u)
{
    const recipe *r = &u->r;
    review_data *d = &u->d;
    unsigned long long state = r->seed * 2654435761ull + 1;
    for (int i = d->train.n - 1; i > 0; i--) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((state >> 33) % (unsigned long long)(i + 1));
        review tmp = d->train.rows[i];
        d->train.rows[i] = d->train.rows[j];
        d->train.rows[j] = tmp;
    }
    for (int i = d->unlabeled.n - 1; i > d->unlabeled_reviews; i--) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        int j = d->unlabeled_reviews +
                (int)((state >> 33) % (unsigned long long)(i - d->unlabeled_reviews + 1));
        review tmp = d->unlabeled.rows[i];
        d->unlabeled.rows[i] = d->unlabeled.rows[j];
        d->unlabeled.rows[j] = tmp;
    }
    if (r->zh >= 0 && d->unlabeled.n > d->unlabeled_reviews + r->zh) {
        for (int i = d->unlabeled_reviews + r->zh; i < d->unlabeled.n; i++)
            free(d->unlabeled.rows[i].text);
        d->unlabeled.n = d->unlabeled_reviews + r->zh;
    }
    if (r->zh)
        fprintf(stderr, "unlabeled: %d reviews, %d texts of unlabeled_zh\n", d->unlabeled_reviews,
                d->unlabeled.n - d->unlabeled_reviews);
    u->n_train = r->limit > 0 && r->limit < d->train.n ? r->limit : d->train.n;
}

/* --split-dir: the split as TSV files. */
static int write_split_files(const run *u, char *err)
{
    static const char *const files[REVIEW_EVAL_SETS] = {
        "eval_chnsenticorp_dev.tsv", "eval_waimai.tsv", "eval_online_shopping.tsv",
        "eval_eprstmt.tsv", "eval_douban.tsv"};
    const char *dir = u->r.split_dir;
    const review_data *d = &u->d;
    int rc;
    mkdir(dir, 0755);
    if ((rc = write_split(dir, "train.tsv", &d->train, u->n_train, err))) return rc;
    for (int e = 0; e < REVIEW_EVAL_SETS; e++)
        if ((rc = write_split(dir, files[e], &d->eval[e], 0, err))) return rc;
    if ((rc = write_split(dir, "unlabeled.tsv", &d->unlabeled, 0, err))) return rc;
    fprintf(stderr, "wrote the split to %s\n", dir);
    return SM_OK;
}

/* The model training starts from: --init's (with its own vocabulary and a
 * head for the two labels), else a fresh one on a vocabulary built from
 * the training and unlabeled texts only. */
static int starting_model(run *u, char *err)
{
    const recipe *r = &u->r;
    const review_data *d = &u->d;
    int rc;
    if (r->init) {
        /* An existing model (e.g. OUT/pretrained) with its own vocabulary. */
        int kept;
        if ((rc = bert_model_load_dir(r->init, &u->m, err))) return rc;
        if ((rc = trainer_prepare_head(u->m, 2, k_labels, r->seed, &kept, err))) return rc;
        if ((rc = vocab_text(u->m->tok, &u->vocab, &u->vocab_len, err))) return rc;
        u->n_tokens = tokenizer_vocab_size(u->m->tok);
        fprintf(stderr, "starting from %s (%d tokens)\n", r->init, u->n_tokens);
        return SM_OK;
    }
    if ((rc = vocab_builder_create(1, &u->vb, err))) return rc;
    for (int i = 0; i < u->n_train; i++)
        if ((rc = vocab_builder_add(u->vb, d->train.rows[i].text, strlen(d->train.rows[i].text),
                                    err)))
            return rc;
    for (int i = 0; i < d->unlabeled.n; i++)
        if ((rc = vocab_builder_add(u->vb, d->unlabeled.rows[i].text,
                                    strlen(d->unlabeled.rows[i].text), err)))
            return rc;
    if ((rc = vocab_builder_build(u->vb, r->min_count, r->vocab_size, &u->vocab, &u->vocab_len,
                                  &u->n_tokens, err)))
        return rc;
    fprintf(stderr, "vocabulary: %d tokens\n", u->n_tokens);
    return bert_model_create_scratch(&r->shape, u->vocab, u->vocab_len, 1, 2, k_labels, r->seed,
                                     &u->m, err);
}

/* The training rows tokenized once; with --soft, each with the teacher's
 * probabilities (joined by the n-gram teacher's with --ngram-teacher; a
 * row the teacher did not label keeps its hard label as a one-hot target),
 * then unlabeled texts the teacher labeled. */
static int build_dataset(run *u, char *err)
{
    const recipe *r = &u->r;
    const review_data *d = &u->d;
    bert_model *m = u->m;
    int rc, n_fit = u->n_fit;
    if ((rc = train_dataset_create(m->cfg.vocab_size, &u->ds, err))) return rc;
    if (r->soft && (rc = soft_labels_load(r->soft, &u->soft, err))) return rc;
    float *p_ngram = NULL, *p_ngram_u = NULL;
    if (r->soft && r->ngram_teacher > 1) {
        sm_wide_config wc;
        sm_wide_config_default(&wc);
        wc.buckets = r->wide_buckets > 0 ? r->wide_buckets : 1 << 20;
        wc.ngram_max = r->wide_ngram_max;
        review_set fitset = {d->train.rows, n_fit, n_fit}; /* a view */
        p_ngram = malloc(((size_t)n_fit + 1) * sizeof *p_ngram);
        p_ngram_u = malloc(((size_t)d->unlabeled.n + 1) * sizeof *p_ngram_u);
        if (!p_ngram || !p_ngram_u) {
            free(p_ngram);
            free(p_ngram_u);
            return sm_error(err, SM_ERR_NOMEM, "out of memory");
        }
        if ((rc = wide_stage_teacher(&fitset, &d->unlabeled, r->ngram_teacher, &wc, r->ngram_l2,
                                     p_ngram, p_ngram_u, err))) {
            free(p_ngram);
            free(p_ngram_u);
            return rc;
        }
        fprintf(stderr, "n-gram teacher: %d folds, its share %g\n", r->ngram_teacher,
                r->ngram_weight);
    }
    int *ids = malloc((size_t)r->shape.max_length * sizeof *ids);
    int no_soft = 0;
    for (int i = 0; i < n_fit && !rc; i++) {
        int n, cut, y = d->train.rows[i].label;
        rc = tokenizer_encode(m->tok, d->train.rows[i].text, strlen(d->train.rows[i].text),
                              r->shape.max_length, ids, &n, &cut, err);
        if (rc) break;
        float p1;
        if (!r->soft) {
            rc = train_dataset_add(u->ds, ids, n, y, err);
            continue;
        }
        if (!soft_labels_find(&u->soft, d->train.rows[i].text, &p1)) {
            p1 = (float)y;
            no_soft++;
        }
        if (p_ngram) p1 = (1 - r->ngram_weight) * p1 + r->ngram_weight * p_ngram[i];
        float q[2] = {1 - p1, p1};
        rc = train_dataset_add_soft(u->ds, ids, n, y, q, 2, err);
    }
    for (int i = 0; r->soft && i < d->unlabeled.n && !rc; i++) {
        if (r->unlabeled_soft >= 0 && u->n_unlabeled_soft >= r->unlabeled_soft) break;
        float p1;
        if (!soft_labels_find(&u->soft, d->unlabeled.rows[i].text, &p1)) continue;
        if (p_ngram_u) p1 = (1 - r->ngram_weight) * p1 + r->ngram_weight * p_ngram_u[i];
        int n, cut;
        rc = tokenizer_encode(m->tok, d->unlabeled.rows[i].text, strlen(d->unlabeled.rows[i].text),
                              r->shape.max_length, ids, &n, &cut, err);
        float q[2] = {1 - p1, p1};
        if (!rc && n > 2) {
            rc = train_dataset_add_soft(u->ds, ids, n, -1, q, 2, err);
            u->n_unlabeled_soft++;
        }
    }
    free(ids);
    free(p_ngram);
    free(p_ngram_u);
    if (rc) return rc;
    if (r->soft)
        fprintf(stderr,
                "distillation: %d soft labels; %d training rows without one (one-hot), "
                "%d unlabeled texts; alpha %g, temperature %g\n",
                u->soft.n, no_soft, u->n_unlabeled_soft, r->alpha, r->temperature);
    return SM_OK;
}

/* Fine-tuning on the dataset (5% held out for the best epoch). */
static int fine_tune(run *u, char *err)
{
    const recipe *r = &u->r;
    trainer_options opt;
    int rc;
    trainer_options_default(&opt);
    opt.loop.epochs = r->epochs;
    opt.loop.lr = r->lr;
    opt.loop.batch_size = r->batch;
    opt.loop.max_length = r->shape.max_length;
    opt.loop.valid_fraction = 0.05f;
    opt.loop.seed = r->seed;
    opt.progress = progress;
    opt.distill_alpha = r->alpha;
    opt.distill_temperature = r->temperature;
    if ((rc = trainer_run(u->m, u->be, u->ds, &opt, &u->res, err))) return rc;
    fprintf(stderr, "trained %d rows in %.0f s (%.1f examples/s), best epoch %d\n", u->res.n_train,
            u->res.seconds, u->res.examples_per_sec, u->res.best_epoch);
    return SM_OK;
}

/* With a wide part to come: the encoder before the wide stage, written to
 * OUT/encoder/ (F32) for later stages. */
static int write_encoder_dir(run *u, char *err)
{
    char dir[4096];
    int rc;
    snprintf(dir, sizeof dir, "%s/encoder", u->r.out);
    mkdir(u->r.out, 0755);
    mkdir(dir, 0755);
    if ((rc = bert_config_to_json(&u->m->cfg, &u->config, err)) ||
        (rc = write_file(dir, "config.json", u->config, strlen(u->config), err)) ||
        (rc = write_file(dir, "vocab.txt", u->vocab, u->vocab_len, err)) ||
        (rc = bert_model_save_safetensors(u->m, ST_F32, &u->weights, &u->weights_len, err)) ||
        (rc = write_file(dir, "model.safetensors", u->weights, u->weights_len, err)))
        return rc;
    free(u->config);
    free(u->weights);
    u->config = NULL;
    u->weights = NULL;
    return SM_OK;
}

/* Calibration on the held-out training rows: the wide part fitted and
 * mixed there (--wide-buckets), else the temperature that fits them best
 * (u->T, 1 without them). */
static int calibrate(run *u, char *err)
{
    const recipe *r = &u->r;
    review_set calib = {u->d.train.rows + u->n_fit, u->n_calib, u->n_calib}; /* a view */
    int rc;
    u->T = 1;
    if ((rc = bert_workspace_create(u->be, &u->m->cfg, 32, r->shape.max_length, &u->ws, err)))
        return rc;
    float *p1 = malloc(((size_t)u->n_calib + 1) * sizeof *p1);
    if (!p1) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    if (r->wide_buckets > 0) { /* the mix on the calibration rows is the calibration */
        sm_wide_config wc;
        sm_wide_config_default(&wc);
        wc.buckets = r->wide_buckets;
        wc.ngram_max = r->wide_ngram_max;
        review_set fitset = {u->d.train.rows, u->n_fit, u->n_fit}; /* a view */
        rc = u->n_calib ? wide_stage_run(u->m, u->ws, &fitset, &calib, r->shape.max_length, &wc,
                                         r->wide_l2, r->n_wide_l2, r->wide_stack, &u->wrep, err)
                        : sm_error(err, SM_ERR_INVALID, "--wide-buckets needs --calib-rows");
    } else if (u->n_calib &&
               !(rc = positive_probs(u->m, u->ws, &calib, r->shape.max_length, p1, err))) {
        u->T = fit_temperature(&calib, p1);
    }
    free(p1);
    if (rc) return rc;
    fprintf(stderr, "temperature %.2f (fitted on %d held-out training rows)\n", u->T, u->n_calib);
    return SM_OK;
}

/* Every held-out set's accuracy and expected calibration error, before
 * and after the temperature (and, with a wide part, each part's accuracy
 * alone), on stdout. */
static int evaluate_sets(run *u, char *err)
{
    const review_data *d = &u->d;
    int rc, max_length = u->r.shape.max_length;
    for (int e = 0; e < REVIEW_EVAL_SETS; e++) {
        float *p1 = malloc(((size_t)d->eval[e].n + 1) * sizeof *p1);
        if (!p1) return sm_error(err, SM_ERR_NOMEM, "out of memory");
        rc = positive_probs(u->m, u->ws, &d->eval[e], max_length, p1, err);
        double same;
        if (!rc) score(&d->eval[e], p1, 1.0, &u->acc[e], &u->ece[e]);
        if (!rc) score(&d->eval[e], p1, u->T, &same, &u->ece_t[e]);
        free(p1);
        if (rc) return rc;
        printf("accuracy %-40s %.4f (%d rows), ECE %.4f, at T %.2f %.4f\n", d->eval_name[e],
               u->acc[e], d->eval[e].n, u->ece[e], u->T, u->ece_t[e]);
        if (u->m->wide) {
            if ((rc = wide_stage_part_accuracy(u->m, u->ws, &d->eval[e], max_length, &u->acc_enc[e],
                                               &u->acc_wide[e], err)))
                return rc;
            printf("         %-40s encoder part alone %.4f, wide part alone %.4f\n",
                   d->eval_name[e], u->acc_enc[e], u->acc_wide[e]);
        }
    }
    return SM_OK;
}

/* The temperature folded into the classifier: logits / T. */
static void fold_temperature(bert_model *m, double T)
{
    for (int k = 0; k < m->cfg.num_labels * (m->cfg.hidden_size + 1); k++) {
        float *x = k < m->cfg.num_labels * m->cfg.hidden_size
                       ? &m->p.cls_w[k]
                       : &m->p.cls_b[k - m->cfg.num_labels * m->cfg.hidden_size];
        *x = (float)(*x / T);
    }
}

/* The model directory: config.json, vocab.txt, model.safetensors (--dtype). */
static int write_model_dir(run *u, char *err)
{
    const recipe *r = &u->r;
    int rc;
    int dtype = !strcmp(r->dtype, "f32") ? ST_F32 : !strcmp(r->dtype, "bf16") ? ST_BF16 : ST_F16;
    mkdir(r->out, 0755);
    if ((rc = bert_config_to_json(&u->m->cfg, &u->config, err))) return rc;
    if ((rc = write_file(r->out, "config.json", u->config, strlen(u->config), err))) return rc;
    if ((rc = write_file(r->out, "vocab.txt", u->vocab, u->vocab_len, err))) return rc;
    if ((rc = bert_model_save_safetensors(u->m, dtype, &u->weights, &u->weights_len, err)))
        return rc;
    return write_file(r->out, "model.safetensors", u->weights, u->weights_len, err);
}

/* One "name": value per evaluation set, as a JSON object's members. */
static void write_per_set(FILE *f, const review_data *d, const double *x)
{
    for (int e = 0; e < REVIEW_EVAL_SETS; e++)
        fprintf(f, "%s\"%s\": %.5f", e ? ", " : "", d->eval_name[e], x[e]);
}

/* OUT/metrics.json: split sizes, shape, recipe, per-epoch figures,
 * accuracy and calibration per evaluation set, timings. */
static int write_metrics(const run *u, char *err)
{
    const recipe *r = &u->r;
    const review_data *d = &u->d;
    const trainer_result *res = &u->res;
    const bert_model *m = u->m;
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.json", r->out);
    FILE *f = fopen(path, "w");
    if (!f) return sm_error(err, SM_ERR_IO, "cannot write '%s'", path);
    fprintf(f, "{\n  \"train_rows\": %d,\n  \"valid_rows\": %d,\n  \"vocab_size\": %d,\n",
            res->n_train, res->n_valid, u->n_tokens);
    fprintf(f,
            "  \"parameters\": %zu,\n  \"shape\": {\"layers\": %d, \"hidden\": %d, \"heads\": %d, "
            "\"intermediate\": %d, \"max_length\": %d},\n",
            bert_model_num_params(m), r->shape.layers, r->shape.hidden, r->shape.heads,
            r->shape.intermediate, r->shape.max_length);
    fprintf(f,
            "  \"recipe\": {\"epochs\": %d, \"lr\": %g, \"batch\": %d, \"seed\": %llu, "
            "\"min_count\": %d, \"vocab_limit\": %d, \"weibo\": %d, \"dtype\": \"%s\", "
            "\"pretrain_epochs\": %d, \"pretrain_lr\": %g, \"init\": %s%s%s, \"zh\": %d, "
            "\"soft\": %s%s%s, \"alpha\": %g, \"temperature\": %g, \"unlabeled_soft\": %d, "
            "\"average_with\": %s%s%s, \"average_weight\": %g},\n",
            r->epochs, r->lr, r->batch, r->seed, r->min_count, r->vocab_size, r->weibo, r->dtype,
            r->pretrain_epochs, r->pretrain_lr, r->init ? "\"" : "", r->init ? r->init : "null",
            r->init ? "\"" : "", r->zh, r->soft ? "\"" : "", r->soft ? r->soft : "null",
            r->soft ? "\"" : "", r->alpha, r->temperature, u->n_unlabeled_soft,
            r->average_with ? "\"" : "", r->average_with ? r->average_with : "null",
            r->average_with ? "\"" : "", (double)r->average_weight);
    fprintf(f, "  \"epochs\": [");
    for (int e = 0; e < res->epochs; e++)
        fprintf(f, "%s{\"train_loss\": %.5f, \"valid_accuracy\": %.5f}", e ? ", " : "",
                res->train_loss[e], res->valid_accuracy[e]);
    fprintf(f, "],\n  \"best_epoch\": %d,\n  \"accuracy\": {", res->best_epoch);
    write_per_set(f, d, u->acc);
    fprintf(f, "},\n  \"temperature\": %.2f,\n  \"calibration_rows\": %d,\n  \"ece\": {", u->T,
            u->n_calib);
    write_per_set(f, d, u->ece);
    fprintf(f, "},\n  \"ece_at_temperature\": {");
    write_per_set(f, d, u->ece_t);
    if (r->wide_buckets > 0)
        fprintf(f,
                "},\n  \"wide\": {\"buckets\": %d, \"ngram_max\": %d, \"l2\": %g, "
                "\"mix_encoder\": %.6f, \"mix_wide\": %.6f, \"calib_log_loss\": %.5f, "
                "\"calib_log_loss_encoder\": %.5f, \"calib_log_loss_wide\": %.5f, "
                "\"seconds\": %.1f, \"only\": %d, \"stack\": %g",
                r->wide_buckets, r->wide_ngram_max, u->wrep.l2, u->wrep.a, u->wrep.c,
                u->wrep.calib_loss, u->wrep.calib_loss_encoder, u->wrep.calib_loss_wide,
                u->wrep.seconds, r->wide_only, r->wide_stack);
    if (m->wide) {
        fprintf(f, "},\n  \"accuracy_encoder_part\": {");
        write_per_set(f, d, u->acc_enc);
        fprintf(f, "},\n  \"accuracy_wide_part\": {");
        write_per_set(f, d, u->acc_wide);
    }
    fprintf(f, "},\n  \"eval_rows\": {");
    for (int e = 0; e < REVIEW_EVAL_SETS; e++)
        fprintf(f, "%s\"%s\": %d", e ? ", " : "", d->eval_name[e], d->eval[e].n);
    fprintf(f,
            "},\n  \"unk_rate_chnsenticorp_dev\": %.6f,\n  \"train_seconds\": %.1f,\n"
            "  \"examples_per_sec\": %.1f,\n  \"total_seconds\": %.1f,\n  \"threads\": %d\n}\n",
            u->unk, res->seconds, res->examples_per_sec, now() - u->t0, backend_cpu_threads(u->be));
    fclose(f);
    fprintf(stderr, "wrote %s (model.safetensors %.1f MB)\n", r->out, u->weights_len / 1e6);
    return SM_OK;
}

/* The stages in order. SM_OK also where the run ends early: after the
 * split files (--split-only 1), after pretraining (--epochs 0). */
static int run_stages(run *u, char *err)
{
    recipe *r = &u->r;
    int rc;
    if ((rc = load_data(u, err))) return rc;
    shuffle_rows(u);
    if (r->split_dir) {
        if ((rc = write_split_files(u, err))) return rc;
        if (r->split_only) return SM_OK;
    }
    if ((rc = starting_model(u, err))) return rc;
    fprintf(stderr, "model: %d layers, hidden %d, %d heads, intermediate %d, %zu parameters\n",
            u->m->cfg.num_hidden_layers, u->m->cfg.hidden_size, u->m->cfg.num_attention_heads,
            u->m->cfg.intermediate_size, bert_model_num_params(u->m));
    if ((rc = backend_cpu_create(r->threads, &u->be, err))) return rc;
    if (r->wide_only && !r->init)
        return sm_error(err, SM_ERR_INVALID, "--wide-only 1 needs --init DIR");
    if (r->wide_only) r->pretrain_epochs = 0;
    if (r->pretrain_epochs > 0 && (rc = pretrain(r, &u->d, u->n_train, u->m, u->be, u->vocab, err)))
        return rc;
    if (r->epochs == 0 && !r->wide_only) { /* pretraining only: the checkpoint is the output */
        fprintf(stderr, "--epochs 0: no fine-tuning; the checkpoint is %s/pretrained\n", r->out);
        return SM_OK;
    }
    /* the last calib_rows training rows fit the temperature (or the wide
     * mix), not the weights */
    u->n_calib = r->calib_rows > 0 && r->calib_rows < u->n_train / 2 ? r->calib_rows : 0;
    u->n_fit = u->n_train - u->n_calib;
    if (!r->wide_only && ((rc = build_dataset(u, err)) || (rc = fine_tune(u, err)))) return rc;
    if (r->average_with && r->average_weight > 0 &&
        (rc = average_with(u->m, r->average_with, r->average_weight, err)))
        return rc;
    if (r->wide_buckets > 0 && (rc = write_encoder_dir(u, err))) return rc;
    if ((rc = calibrate(u, err)) || (rc = evaluate_sets(u, err))) return rc;
    fold_temperature(u->m, u->T);
    u->unk = unk_rate(u->m->tok, &u->d.eval[0]);
    printf("[UNK] rate on %s: %.4f%%\n", u->d.eval_name[0], 100 * u->unk);
    if ((rc = write_model_dir(u, err))) return rc;
    return write_metrics(u, err);
}

int main(int argc, char **argv)
{
    char err[SM_ERR_MAX] = "";
    run u;
    int rc;

    memset(&u, 0, sizeof u);
    u.t0 = now();
    if (parse_args(argc, argv, &u.r)) return 2;
    if (u.r.soft_write && !u.r.soft) {
        fprintf(stderr, "train_builtin: --soft-write needs --soft OUT\n");
        return 2;
    }
    rc = u.r.soft_write ? write_soft_labels(&u.r, err) : run_stages(&u, err);
    if (rc) fprintf(stderr, "train_builtin: %s\n", err);
    run_free(&u);
    return rc ? 1 : 0;
}
