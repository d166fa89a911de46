/* reviews.h: the labeled review sets in ../shared/data, split into training
 * and evaluation texts with no overlap (see reviews.c for the rules). */
#ifndef SM_REVIEWS_H
#define SM_REVIEWS_H

#include <stdint.h>

#define REVIEW_EVAL_SETS 5

typedef struct review {
    char *text;
    int label; /* 0 negative, 1 positive; -1 unlabeled */
} review;

typedef struct review_set {
    review *rows;
    int n, cap;
} review_set;

typedef struct review_data {
    review_set train;      /* de-duplicated, no eval text */
    review_set unlabeled;  /* no eval text */
    int unlabeled_reviews; /* the first ones, from unlabeled_reviews/ */
    review_set eval[REVIEW_EVAL_SETS];
    const char *eval_name[REVIEW_EVAL_SETS];
    int dropped_eval_overlap; /* texts equal to an eval text */
    int dropped_duplicates;   /* later copies of a text */
    int dropped_conflicts;    /* copies with disagreeing labels */
} review_data;

/* NFKC + case fold + no whitespace; malloc'd (NULL when out of memory). */
char *review_normalize(const char *text);
/* 64-bit FNV-1a of a (normalised) text: the evaluation buckets, soft label keys. */
uint64_t review_hash(const char *s);
/* with_zh: also the texts of unlabeled_zh/ as unlabeled (after
 * unlabeled_reviews, in file order). */
int reviews_load(const char *data_dir, int with_weibo, int with_zh, review_data *d, char *err);
void reviews_free(review_data *d);
void reviews_set_free(review_set *s);

#endif
