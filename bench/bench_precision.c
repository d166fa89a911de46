/* bench_precision.c: what BF16 and INT8 weights cost a model in accuracy on
 * the CPU.
 *
 * Classifies every row of a TSV (label<TAB>text, an optional header line
 * starting with "label") with a model directory several times, as classify
 * does (batches sorted by length): with FP32 weights (the shipped default,
 * the reference), with BF16 linear layers (a CPU with AVX512-BF16) and with
 * INT8 ones as sentiment_config('precision', 'int8') runs them (a CPU with
 * AVX512-VNNI; bert_pack_plan), plus any --plan given: four letters for the
 * query/key/value, attention output, FFN in and FFN out matrices, each f
 * (fp32), b (bf16) or i (int8), e.g. --plan iiif. For each it prints the
 * accuracy, how often it agrees with FP32 on the top class, the largest and
 * mean change of a probability, and the time of the pass. A label is the
 * model's label name or its index. Not a test: it asserts nothing.
 *
 *   build/bench/bench_precision --model DIR --tsv ../shared/data/chnsenticorp/dev.tsv \
 *       [--threads N] [--batch N] [--max-length N] [--plan PLAN]...
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct rows {
    int n, cap;
    char **text;
    size_t *len;
    int *label; /* class index, -1 when the label is not the model's */
} rows;

static void rows_free(rows *r)
{
    for (int i = 0; i < r->n; i++) free(r->text[i]);
    free(r->text);
    free(r->len);
    free(r->label);
}

/* The class index of a label: its name, else a number below K. */
static int label_index(const bert_config *cfg, const char *s)
{
    int i = bert_config_label_index(cfg, s);
    char *end;
    long v;
    if (i >= 0) return i;
    v = strtol(s, &end, 10);
    return *s && !*end && v >= 0 && v < cfg->num_labels ? (int)v : -1;
}

static int read_tsv(const char *path, const bert_config *cfg, rows *r, char *err)
{
    static char line[1 << 20];
    FILE *f = fopen(path, "r");
    if (!f) return sm_error(err, SM_ERR_IO, "cannot open %s", path);
    memset(r, 0, sizeof *r);
    for (int first = 1; fgets(line, sizeof line, f); first = 0) {
        char *tab = strchr(line, '\t');
        size_t len;
        if (!tab) continue;
        *tab = 0;
        if (first && !strcmp(line, "label")) continue;
        len = strcspn(tab + 1, "\r\n");
        if (r->n == r->cap) {
            int cap = r->cap ? 2 * r->cap : 1024;
            char **t = realloc(r->text, (size_t)cap * sizeof *t);
            if (t) r->text = t;
            size_t *l = realloc(r->len, (size_t)cap * sizeof *l);
            if (l) r->len = l;
            int *lb = realloc(r->label, (size_t)cap * sizeof *lb);
            if (lb) r->label = lb;
            if (!t || !l || !lb) break;
            r->cap = cap;
        }
        if (!(r->text[r->n] = malloc(len + 1))) break;
        memcpy(r->text[r->n], tab + 1, len);
        r->text[r->n][len] = 0;
        r->len[r->n] = len;
        r->label[r->n] = label_index(cfg, line);
        r->n++;
    }
    int bad = ferror(f) || !feof(f);
    fclose(f);
    if (bad) return sm_error(err, SM_ERR_NOMEM, "reading %s failed (out of memory?)", path);
    if (!r->n) return sm_error(err, SM_ERR_FORMAT, "%s has no label<TAB>text rows", path);
    return SM_OK;
}

/* Classifies every row with p; *seconds gets the time. */
static int classify(const bert_model *m, const bert_params *p, bert_workspace *ws,
                    const rows *r, int max_length, int batch, float *probs, double *seconds,
                    char *err)
{
    double t0 = now();
    int rc = bert_classify_texts(m, p, ws, (const char *const *)r->text, r->len, r->n,
                                 max_length, batch, probs, NULL, err);
    *seconds = now() - t0;
    return rc;
}

static int top(const float *p, int K)
{
    int best = 0;
    for (int k = 1; k < K; k++)
        if (p[k] > p[best]) best = k;
    return best;
}

typedef struct variant {
    char name[32];
    bert_precision plan[BERT_PACK_N];
} variant;

/* "iiif" -> a plan; 0 on success. */
static int parse_plan(const char *s, variant *v)
{
    if (strlen(s) != BERT_PACK_N) return 1;
    for (int i = 0; i < BERT_PACK_N; i++) {
        if (s[i] == 'f') v->plan[i] = BERT_FP32;
        else if (s[i] == 'b') v->plan[i] = BERT_BF16;
        else if (s[i] == 'i') v->plan[i] = BERT_INT8;
        else return 1;
        if ((s[i] == 'b' && !backend_cpu_pack_native(BACKEND_PACK_BF16)) ||
            (s[i] == 'i' && !backend_cpu_pack_native(BACKEND_PACK_INT8)))
            return 1;
    }
    snprintf(v->name, sizeof v->name, "plan %s", s);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *tsv = NULL;
    int threads = 0, batch = 32, max_length = 0, rc = 1, n_var = 0;
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    bert_packed_params *pp = NULL;
    backend *be = NULL;
    bert_workspace *ws = NULL;
    float *p32 = NULL, *pv = NULL;
    rows r = {0};
    variant var[16];

    if (backend_cpu_pack_native(BACKEND_PACK_BF16)) {
        snprintf(var[n_var].name, sizeof var[n_var].name, "bf16");
        bert_pack_plan(BERT_BF16, var[n_var++].plan);
    }
    if (backend_cpu_pack_native(BACKEND_PACK_INT8)) {
        snprintf(var[n_var].name, sizeof var[n_var].name, "int8");
        bert_pack_plan(BERT_INT8, var[n_var++].plan);
    }
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(argv[i], "--model")) dir = v;
        else if (!strcmp(argv[i], "--tsv")) tsv = v;
        else if (!strcmp(argv[i], "--threads")) threads = atoi(v);
        else if (!strcmp(argv[i], "--batch")) batch = atoi(v);
        else if (!strcmp(argv[i], "--max-length")) max_length = atoi(v);
        else if (!strcmp(argv[i], "--plan") && n_var < 16 && !parse_plan(v, &var[n_var])) n_var++;
        else goto usage;
        i++;
    }
    if (!dir || !tsv || batch < 1 || threads < 0 || max_length < 0) goto usage;
    if (bert_model_load_dir(dir, &m, err) || read_tsv(tsv, &m->cfg, &r, err) ||
        backend_cpu_create(threads, &be, err))
        goto end;
    int K = m->cfg.num_labels, seq = bert_max_length(&m->cfg);
    if (max_length > 0 && max_length < seq) seq = max_length;
    if (bert_workspace_create(be, &m->cfg, batch, seq, &ws, err)) goto end;
    p32 = malloc((size_t)r.n * K * sizeof *p32);
    pv = malloc((size_t)r.n * K * sizeof *pv);
    if (!p32 || !pv) {
        sm_error(err, SM_ERR_NOMEM, "out of memory");
        goto end;
    }
    double t32, tv;
    if (classify(m, &m->p, ws, &r, seq, batch, p32, &t32, err)) goto end;
    int labeled = 0, right32 = 0;
    for (int i = 0; i < r.n; i++)
        if (r.label[i] >= 0) {
            labeled++;
            right32 += top(p32 + (size_t)i * K, K) == r.label[i];
        }
    printf("%s on %s: %d rows (%d with a label of the model), %d thread%s, batch %d, "
           "max_length %d\n",
           dir, tsv, r.n, labeled, backend_cpu_threads(be), backend_cpu_threads(be) == 1 ? "" : "s",
           batch, seq);
    printf("  %-10s accuracy %.4f                                                  time %.2f s\n",
           "fp32", labeled ? (double)right32 / labeled : NAN, t32);
    fflush(stdout);
    for (int v = 0; v < n_var; v++) {
        if (bert_params_pack(be, &m->cfg, &m->p, var[v].plan, &pp, err) ||
            classify(m, &pp->p, ws, &r, seq, batch, pv, &tv, err))
            goto end;
        bert_packed_params_free(pp);
        pp = NULL;
        int right = 0, agree = 0;
        double worst = 0, sum = 0;
        for (int i = 0; i < r.n; i++) {
            int a = top(p32 + (size_t)i * K, K), b = top(pv + (size_t)i * K, K);
            agree += a == b;
            if (r.label[i] >= 0) right += b == r.label[i];
            for (int k = 0; k < K; k++) {
                double d = fabs((double)p32[(size_t)i * K + k] - pv[(size_t)i * K + k]);
                worst = d > worst ? d : worst;
                sum += d;
            }
        }
        printf("  %-10s accuracy %.4f (%+.2f points)  agreement %.4f  |p - p fp32| max %.2e "
               "mean %.2e  time %.2f s\n",
               var[v].name, labeled ? (double)right / labeled : NAN,
               labeled ? 100.0 * (right - right32) / labeled : NAN, (double)agree / r.n, worst,
               sum / ((double)r.n * K), tv);
        fflush(stdout);
    }
    rc = 0;
end:
    if (rc) fprintf(stderr, "bench_precision: %s\n", err);
    free(p32);
    free(pv);
    rows_free(&r);
    bert_workspace_free(ws);
    if (be) be->destroy(be);
    bert_packed_params_free(pp);
    bert_model_free(m);
    return rc;
usage:
    fprintf(stderr, "usage: bench_precision --model DIR --tsv FILE (label<TAB>text) "
                    "[--threads N] [--batch N] [--max-length N] [--plan PLAN]...\n"
                    "  PLAN: 4 letters f|b|i for QKV, attention out, FFN in, FFN out "
                    "(b needs AVX512-BF16, i AVX512-VNNI)\n");
    return 2;
}
