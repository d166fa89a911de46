/* reviews.c: the public review sets in ../shared/data, split so that no text
 * the built-in model is evaluated on is ever trained on.
 *
 * Every text is compared in a normalised form (NFKC, case-folded, all
 * whitespace removed), the same for every set, because the sets share texts
 * with small differences (see ../shared/data/README.md, "Overlap").
 * Evaluation texts: all of chnsenticorp/dev and eprstmt, and the rows of
 * waimai_10k, online_shopping_10_cats and douban_book_review whose
 * normalised text hashes to bucket 0 of 10 (FNV-1a). Training texts:
 * everything else that is labeled and binary (chnsenticorp/train,
 * chnsenticorp_htl_all, the rest of waimai, online_shopping and douban,
 * optionally weibo), minus any text whose normalised form is an evaluation
 * text, minus duplicates (first kept; conflicting labels: all dropped).
 * Unlabeled texts: unlabeled_reviews, optionally unlabeled_zh, minus
 * evaluation texts. Owns the review_set arrays it returns.
 */
#include "recipe/reviews.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/errors.h"

/* ---- normalisation and hashing ---------------------------------------- */

char *review_normalize(const char *text)
{
    utf8proc_uint8_t *mapped = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)text, 0, &mapped,
                                      UTF8PROC_NULLTERM | UTF8PROC_STABLE | UTF8PROC_COMPAT |
                                          UTF8PROC_COMPOSE | UTF8PROC_CASEFOLD | UTF8PROC_IGNORE);
    if (n < 0) return strdup(text); /* invalid UTF-8: compare as bytes */
    /* Drop whitespace (Zs and ASCII controls that act as space). */
    utf8proc_uint8_t *out = mapped;
    const utf8proc_uint8_t *p = mapped;
    while (*p) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t len = utf8proc_iterate(p, -1, &cp);
        if (len <= 0) break;
        int space = cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' ||
                    utf8proc_category(cp) == UTF8PROC_CATEGORY_ZS;
        if (!space) {
            memmove(out, p, (size_t)len);
            out += len;
        }
        p += len;
    }
    *out = 0;
    return (char *)mapped;
}

uint64_t review_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---- a string set (open addressing) ------------------------------------ */

typedef struct str_set {
    char **slot; /* normalised texts, owned */
    int *value;  /* per slot: label, or -1 for "conflicting" */
    size_t cap, used;
} str_set;

static int set_grow(str_set *s)
{
    size_t cap = s->cap ? s->cap * 2 : 1 << 16;
    char **slot = calloc(cap, sizeof *slot);
    int *value = calloc(cap, sizeof *value);
    if (!slot || !value) {
        free(slot);
        free(value);
        return SM_ERR_NOMEM;
    }
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->slot[i]) continue;
        size_t j = review_hash(s->slot[i]) & (cap - 1);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = s->slot[i];
        value[j] = s->value[i];
    }
    free(s->slot);
    free(s->value);
    s->slot = slot;
    s->value = value;
    s->cap = cap;
    return SM_OK;
}

/* Returns the slot for key (existing or empty). */
static size_t set_find(const str_set *s, const char *key)
{
    size_t j = review_hash(key) & (s->cap - 1);
    while (s->slot[j] && strcmp(s->slot[j], key)) j = (j + 1) & (s->cap - 1);
    return j;
}

static int set_contains(const str_set *s, const char *key)
{
    return s->cap && s->slot[set_find(s, key)] != NULL;
}

/* Inserts key (taking ownership) or, if present, frees it (as it does when
 * the table cannot grow); *slot_out gets its slot and *added whether it was
 * new. */
static int set_insert(str_set *s, char *key, int value, size_t *slot_out, int *added)
{
    if (2 * (s->used + 1) > s->cap && set_grow(s)) {
        free(key);
        return SM_ERR_NOMEM;
    }
    size_t j = set_find(s, key);
    *added = s->slot[j] == NULL;
    if (*added) {
        s->slot[j] = key;
        s->value[j] = value;
        s->used++;
    } else {
        free(key);
    }
    *slot_out = j;
    return SM_OK;
}

static void set_free(str_set *s)
{
    for (size_t i = 0; i < s->cap; i++) free(s->slot[i]);
    free(s->slot);
    free(s->value);
    memset(s, 0, sizeof *s);
}

/* ---- reading TSV files -------------------------------------------------- */

static int set_add_row(review_set *rs, const char *text, int label)
{
    if (rs->n == rs->cap) {
        int cap = rs->cap ? rs->cap * 2 : 4096;
        review *r = realloc(rs->rows, (size_t)cap * sizeof *r);
        if (!r) return SM_ERR_NOMEM;
        rs->rows = r;
        rs->cap = cap;
    }
    rs->rows[rs->n].text = strdup(text);
    rs->rows[rs->n].label = label;
    if (!rs->rows[rs->n].text) return SM_ERR_NOMEM;
    rs->n++;
    return SM_OK;
}

/* Calls row(user, label, text) for each data line of a `label<TAB>text[...]`
 * file (label -1 for text-only files). */
static int read_tsv(const char *path, int has_label, int (*row)(void *user, int label, char *text),
                    void *user, char *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return sm_error(err, SM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = SM_OK, first = 1;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (first) { /* header */
            first = 0;
            continue;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        char *text = line;
        int label = -1;
        if (has_label) {
            char *tab = strchr(line, '\t');
            if (!tab) continue;
            *tab = 0;
            label = atoi(line);
            text = tab + 1;
            char *extra = strchr(text, '\t'); /* online_shopping's `cat` */
            if (extra) *extra = 0;
        }
        if (!*text) continue;
        if ((rc = row(user, label, text))) break;
    }
    free(line);
    fclose(f);
    if (rc) return sm_error(err, rc, "out of memory reading '%s'", path);
    return SM_OK;
}

static int add_labeled(void *user, int label, char *text)
{
    return set_add_row(user, text, label);
}

/* ---- the split ---------------------------------------------------------- */

typedef struct split_ctx {
    review_data *d;
    int eval_set;        /* index into d->eval, or -1 */
    int hashed;          /* 1: rows in bucket 0 go to eval_set, rest train */
    str_set *eval_texts; /* normalised evaluation texts */
    review_set *pending; /* training candidates (filtered at the end) */
} split_ctx;

static int collect_eval_row(void *user, int label, char *text)
{
    split_ctx *c = user;
    if (label != 0 && label != 1) return SM_OK;
    char *norm = review_normalize(text);
    if (!norm) return SM_ERR_NOMEM;
    int to_eval = !c->hashed || review_hash(norm) % 10 == 0;
    int rc;
    if (to_eval) {
        size_t slot;
        int added;
        rc = set_add_row(&c->d->eval[c->eval_set], text, label);
        if (!rc) rc = set_insert(c->eval_texts, norm, label, &slot, &added);
        else free(norm);
        return rc;
    }
    free(norm);
    return set_add_row(c->pending, text, label);
}

int reviews_load(const char *data_dir, int with_weibo, int with_zh, review_data *d, char *err)
{
    static const struct {
        const char *name, *path;
        int hashed;
    } evals[REVIEW_EVAL_SETS] = {
        {"chnsenticorp/dev", "chnsenticorp/dev.tsv", 0},
        {"waimai_10k (held-out 10%)", "waimai_10k/all.tsv", 1},
        {"online_shopping_10_cats (held-out 10%)", "online_shopping_10_cats/all.tsv", 1},
        {"eprstmt", "eprstmt/all.tsv", 0},
        {"douban_book_review (held-out 10%)", "douban_book_review/all.tsv", 1},
    };
    static const char *const train_only[] = {
        "chnsenticorp/train.tsv",
        "chnsenticorp_htl_all/all.tsv",
        "weibo_senti_100k_partial/all.tsv",
    };
    str_set eval_texts = {0}, train_texts = {0};
    review_set pending = {0};
    char path[4096];
    int rc = SM_OK;

    memset(d, 0, sizeof *d);
    for (int e = 0; e < REVIEW_EVAL_SETS; e++) {
        split_ctx c = {d, e, evals[e].hashed, &eval_texts, &pending};
        d->eval_name[e] = evals[e].name;
        snprintf(path, sizeof path, "%s/%s", data_dir, evals[e].path);
        if ((rc = read_tsv(path, 1, collect_eval_row, &c, err))) goto end;
    }
    /* Hash-split sets contributed their training part to `pending`; add the
     * training-only sets, then filter and de-duplicate everything. */
    for (size_t i = 0; i < sizeof train_only / sizeof *train_only; i++) {
        if (!with_weibo && strstr(train_only[i], "weibo")) continue;
        snprintf(path, sizeof path, "%s/%s", data_dir, train_only[i]);
        if ((rc = read_tsv(path, 1, add_labeled, &pending, err))) goto end;
    }
    for (int i = 0; i < pending.n; i++) {
        review *r = &pending.rows[i];
        if (r->label != 0 && r->label != 1) continue;
        char *norm = review_normalize(r->text);
        if (!norm) {
            rc = SM_ERR_NOMEM;
            goto end;
        }
        if (set_contains(&eval_texts, norm)) {
            d->dropped_eval_overlap++;
            free(norm);
            continue;
        }
        size_t slot;
        int added;
        if ((rc = set_insert(&train_texts, norm, r->label, &slot, &added))) goto end;
        if (!added && train_texts.value[slot] != r->label) train_texts.value[slot] = -1;
        if (!added) d->dropped_duplicates++;
    }
    /* Second pass in the original order: keep the first copy of each text
     * whose label did not conflict. */
    for (int i = 0; i < pending.n; i++) {
        review *r = &pending.rows[i];
        if (r->label != 0 && r->label != 1) continue;
        char *norm = review_normalize(r->text);
        if (!norm) {
            rc = SM_ERR_NOMEM;
            goto end;
        }
        size_t slot = train_texts.cap ? set_find(&train_texts, norm) : 0;
        int keep = train_texts.cap && train_texts.slot[slot] && train_texts.value[slot] == r->label;
        if (train_texts.cap && train_texts.slot[slot] && train_texts.value[slot] == -1)
            d->dropped_conflicts++;
        free(norm);
        if (!keep) continue;
        train_texts.value[slot] = -2; /* taken: later copies are duplicates */
        if ((rc = set_add_row(&d->train, r->text, r->label))) goto end;
    }
    /* Unlabeled texts (vocabulary, pre-training), minus evaluation texts. */
    static const char *const unlabeled_files[] = {
        "unlabeled_reviews/eprstmt_unlabeled.tsv",
        "unlabeled_zh/fewclue_texts.tsv",
        "unlabeled_zh/weibo_ced.tsv",
        "unlabeled_zh/weibo_checked_1.tsv",
        "unlabeled_zh/weibo_checked_2.tsv",
        "unlabeled_zh/peoples_daily_1998.tsv",
        "unlabeled_zh/cluecorpussmall_sample.tsv",
    };
    review_set unlabeled = {0};
    int first_file_rows = -1;
    for (size_t i = 0; i < (with_zh ? sizeof unlabeled_files / sizeof *unlabeled_files : 1); i++) {
        snprintf(path, sizeof path, "%s/%s", data_dir, unlabeled_files[i]);
        if ((rc = read_tsv(path, 0, add_labeled, &unlabeled, err))) {
            reviews_set_free(&unlabeled);
            goto end;
        }
        if (first_file_rows < 0) first_file_rows = unlabeled.n;
    }
    for (int i = 0; i < unlabeled.n && !rc; i++) {
        char *norm = review_normalize(unlabeled.rows[i].text);
        if (!norm) {
            rc = SM_ERR_NOMEM;
            break;
        }
        if (set_contains(&eval_texts, norm)) d->dropped_eval_overlap++;
        else rc = set_add_row(&d->unlabeled, unlabeled.rows[i].text, -1);
        if (i + 1 == first_file_rows) d->unlabeled_reviews = d->unlabeled.n;
        free(norm);
    }
    reviews_set_free(&unlabeled);
end:
    reviews_set_free(&pending);
    set_free(&eval_texts);
    set_free(&train_texts);
    if (rc && rc != SM_ERR_IO) sm_error(err, rc, "out of memory splitting the review data");
    if (rc) reviews_free(d);
    return rc;
}

void reviews_set_free(review_set *s)
{
    for (int i = 0; i < s->n; i++) free(s->rows[i].text);
    free(s->rows);
    memset(s, 0, sizeof *s);
}

void reviews_free(review_data *d)
{
    reviews_set_free(&d->train);
    reviews_set_free(&d->unlabeled);
    for (int e = 0; e < REVIEW_EVAL_SETS; e++) reviews_set_free(&d->eval[e]);
}
