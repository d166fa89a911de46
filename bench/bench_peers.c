/* bench_peers.c: our engine's side of the comparison with ONNX Runtime,
 * PyTorch and PaddlePaddle (scripts/bench.sh, bench/peers.py drive it).
 *
 * Loads a Hugging Face model directory, reads workloads (token ids written by
 * the Python side, one sequence a line, already in the order they are to be
 * batched), and times the encoder on them: every `batch` consecutive lines
 * form one batch, padded to its own longest sequence. The padded id arrays
 * are built before the clock starts, as they are for the other engines; the
 * timed part is the forward pass and the softmax. A warm-up (8 rows of the
 * longest batch), then --runs passes over the workload; each pass's time is
 * printed.
 *
 *   build/bench/bench_peers --model DIR --threads 2 --runs 5 \
 *       real-b32:32:work/real-b32.ids:out/ours-real-b32-t2.probs ...
 *
 * A work argument is NAME:BATCH:IDS_FILE[:PROBS_FILE]; PROBS_FILE gets the
 * probabilities of the first timed pass, one sequence a line.
 *
 * --precision int8 runs the encoder's linear layers with INT8 weights and
 * inputs (AVX512-VNNI; the matrices bert_pack_plan packs, packed once at
 * load, before any timing), as sentiment_config('precision', 'int8') does;
 * everything else, timed part included, is the same as with fp32 (the
 * default). On a CPU without AVX512-VNNI it prints one JSON line with
 * "available": false and exits with status 3, before loading anything.
 * fp32 runs what precision fp32 runs in the extension: on a CPU with
 * AVX-512F the FP32 weights packed once (cpu/gemm_f32.h), else OpenBLAS.
 *
 * With --serve it loads everything, prints {"ready": true} and then takes
 * commands on stdin, one a line, answering each with one JSON line:
 * "warm NAME" (the warm-up batch), "run NAME" (one timed pass), "quit". The
 * harness uses this to interleave the engines pass by pass.
 *
 *   build/bench/bench_peers --model DIR --check-tokens TEXTS IDS --max-length 128
 *
 * tokenizes each line of TEXTS with our tokenizer and compares the ids with
 * the same line of IDS (written by transformers' BertTokenizer).
 *
 * Output: one JSON object a line on stdout. Not a test: it asserts nothing
 * about speed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "cpu/blas.h"
#include "encoder/bert.h"

#define MAX_WORK 16
#define MAX_RUNS 64
#define WARM_ROWS 8 /* as bench/peers.py */
#define EXIT_UNAVAILABLE 3 /* --precision int8 on a CPU without AVX512-VNNI */

typedef struct work {
    char name[64];
    int batch;
    const char *ids_path, *probs_path;
    int n;          /* sequences */
    int *len;       /* (n) */
    int **seq;      /* (n) ids */
    int n_batches;
    int *T;         /* (n_batches) padded length of each batch */
    int **padded;   /* (n_batches) ids (B, T) */
    int passes;     /* timed passes done */
} work;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads one line of any length; returns NULL at end of file. */
static char *read_line(FILE *f, char **buf, size_t *cap)
{
    size_t used = 0;
    if (!*buf) {
        *cap = 1 << 12;
        *buf = malloc(*cap);
        if (!*buf) return NULL;
    }
    for (;;) {
        if (!fgets(*buf + used, (int)(*cap - used), f)) return used ? *buf : NULL;
        used += strlen(*buf + used);
        if (used && (*buf)[used - 1] == '\n') {
            (*buf)[--used] = 0;
            if (used && (*buf)[used - 1] == '\r') (*buf)[--used] = 0;
            return *buf;
        }
        if (feof(f)) return *buf;
        char *grown = realloc(*buf, *cap * 2);
        if (!grown) return NULL;
        *buf = grown;
        *cap *= 2;
    }
}

/* Space-separated ints of a line; *n gets the count. */
static int *parse_ids(const char *line, int *n)
{
    int cap = 32, used = 0;
    int *ids = malloc((size_t)cap * sizeof *ids);
    const char *p = line;
    while (ids) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (used == cap) {
            int *grown = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!grown) {
                free(ids);
                return NULL;
            }
            ids = grown;
        }
        ids[used++] = (int)v;
        p = end;
    }
    *n = used;
    return ids;
}

static int load_work(work *w, const bert_config *cfg, int pad_id)
{
    FILE *f = fopen(w->ids_path, "r");
    if (!f) {
        fprintf(stderr, "bench_peers: cannot open %s\n", w->ids_path);
        return 1;
    }
    char *buf = NULL;
    size_t cap = 0;
    int alloc = 0;
    const char *line;
    while ((line = read_line(f, &buf, &cap))) {
        if (!*line) continue;
        if (w->n == alloc) {
            alloc = alloc ? alloc * 2 : 256;
            w->seq = realloc(w->seq, (size_t)alloc * sizeof *w->seq);
            w->len = realloc(w->len, (size_t)alloc * sizeof *w->len);
        }
        int n;
        int *ids = parse_ids(line, &n);
        if (!ids || n < 1 || n > bert_max_length(cfg)) {
            fprintf(stderr, "bench_peers: %s: bad sequence on line %d\n", w->ids_path, w->n + 1);
            fclose(f);
            free(buf);
            return 1;
        }
        for (int i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= cfg->vocab_size) {
                fprintf(stderr, "bench_peers: %s: id %d out of range\n", w->ids_path, ids[i]);
                fclose(f);
                free(buf);
                return 1;
            }
        w->seq[w->n] = ids;
        w->len[w->n++] = n;
    }
    fclose(f);
    free(buf);
    if (!w->n) {
        fprintf(stderr, "bench_peers: %s: no sequences\n", w->ids_path);
        return 1;
    }
    w->n_batches = (w->n + w->batch - 1) / w->batch;
    w->T = malloc((size_t)w->n_batches * sizeof *w->T);
    w->padded = malloc((size_t)w->n_batches * sizeof *w->padded);
    for (int k = 0; k < w->n_batches; k++) {
        int first = k * w->batch;
        int B = w->n - first < w->batch ? w->n - first : w->batch, T = 0;
        for (int b = 0; b < B; b++) T = w->len[first + b] > T ? w->len[first + b] : T;
        w->T[k] = T;
        w->padded[k] = malloc((size_t)B * T * sizeof(int));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                w->padded[k][(size_t)b * T + t] = t < w->len[first + b] ? w->seq[first + b][t] : pad_id;
    }
    return 0;
}

static void work_free(work *w)
{
    for (int i = 0; i < w->n; i++) free(w->seq[i]);
    for (int k = 0; k < w->n_batches; k++) free(w->padded[k]);
    free(w->seq);
    free(w->len);
    free(w->T);
    free(w->padded);
}

/* The softmax classify uses (model/encoder/classifier.c). */
static void softmax(float *x, int K)
{
    float mx = x[0];
    for (int k = 1; k < K; k++) mx = x[k] > mx ? x[k] : mx;
    double sum = 0.0;
    for (int k = 0; k < K; k++) sum += exp((double)x[k] - mx);
    for (int k = 0; k < K; k++) x[k] = (float)(exp((double)x[k] - mx) / sum);
}

/* One batch (at most max_rows of its rows): forward with the parameters p
 * (m's own, or their packed copy), softmax into probs (B, K). */
static int run_batch(const bert_model *m, const bert_params *p, bert_workspace *ws,
                     const work *w, int k, int max_rows, float *probs, char *err)
{
    int first = k * w->batch;
    int B = w->n - first < w->batch ? w->n - first : w->batch;
    if (B > max_rows) B = max_rows;
    int K = m->cfg.num_labels;
    int rc = bert_forward(&m->cfg, p, ws, w->padded[k], w->len + first, B, w->T[k], probs, NULL,
                          err);
    if (rc) return rc;
    for (int b = 0; b < B; b++) softmax(probs + (size_t)b * K, K);
    return 0;
}

/* Warm-up: WARM_ROWS rows of the workload's longest batch, so first touch
 * of the workspace and thread start-up are not timed. */
static int warm_up(const bert_model *m, const bert_params *p, bert_workspace *ws,
                   const work *w, float *probs, double *seconds, char *err)
{
    int longest = 0;
    for (int k = 1; k < w->n_batches; k++) longest = w->T[k] > w->T[longest] ? k : longest;
    double t0 = now();
    int rc = run_batch(m, p, ws, w, longest, WARM_ROWS, probs, err);
    *seconds = now() - t0;
    return rc;
}

/* One timed pass over the workload. The first pass of a workload writes its
 * probabilities to probs_path. */
static int one_pass(const bert_model *m, const bert_params *p, bert_workspace *ws, work *w,
                    float *probs, double *seconds, char *err)
{
    int K = m->cfg.num_labels;
    float *all = NULL;
    if (!w->passes && w->probs_path) {
        all = malloc((size_t)w->n * K * sizeof *all);
        if (!all) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    }
    double t0 = now();
    for (int k = 0; k < w->n_batches; k++) {
        int rc = run_batch(m, p, ws, w, k, w->batch, probs, err);
        if (rc) {
            free(all);
            return rc;
        }
        if (all) {
            int first = k * w->batch;
            int B = w->n - first < w->batch ? w->n - first : w->batch;
            memcpy(all + (size_t)first * K, probs, (size_t)B * K * sizeof *probs);
        }
    }
    *seconds = now() - t0;
    w->passes++;
    if (all) {
        FILE *f = fopen(w->probs_path, "w");
        if (!f) {
            free(all);
            return sm_error(err, SM_ERR_IO, "cannot write %s", w->probs_path);
        }
        for (int s = 0; s < w->n; s++)
            for (int k = 0; k < K; k++)
                fprintf(f, "%.9g%c", all[(size_t)s * K + k], k + 1 < K ? ' ' : '\n');
        fclose(f);
        free(all);
    }
    return 0;
}

static int check_tokens(const bert_model *m, const char *texts_path, const char *ids_path,
                        int max_length)
{
    FILE *ft = fopen(texts_path, "r"), *fi = fopen(ids_path, "r");
    if (!ft || !fi) {
        fprintf(stderr, "bench_peers: cannot open %s\n", ft ? ids_path : texts_path);
        if (ft) fclose(ft);
        if (fi) fclose(fi);
        return 1;
    }
    char *tb = NULL, *ib = NULL, err[SM_ERR_MAX];
    size_t tc = 0, ic = 0;
    int *ours = malloc((size_t)max_length * sizeof *ours);
    int lines = 0, same = 0, first_diff = 0;
    const char *text, *line;
    while ((text = read_line(ft, &tb, &tc))) {
        line = read_line(fi, &ib, &ic);
        if (!line) break;
        lines++;
        int n, cut, n_ref;
        if (tokenizer_encode(m->tok, text, strlen(text), max_length, ours, &n, &cut, err)) {
            fprintf(stderr, "bench_peers: line %d: %s\n", lines, err);
            continue;
        }
        int *ref = parse_ids(line, &n_ref);
        if (ref && n_ref == n && !memcmp(ref, ours, (size_t)n * sizeof *ours)) same++;
        else if (!first_diff) first_diff = lines;
        free(ref);
    }
    if (read_line(fi, &ib, &ic)) first_diff = first_diff ? first_diff : lines + 1;
    printf("{\"check\": \"tokens\", \"texts\": %d, \"identical\": %d, \"first_difference\": %d}\n",
           lines, same, first_diff);
    free(ours);
    free(tb);
    free(ib);
    fclose(ft);
    fclose(fi);
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_peers --model DIR [--threads N] [--runs N] [--serve]\n"
            "                   [--precision fp32|int8] NAME:BATCH:IDS[:PROBS]...\n"
            "       bench_peers --model DIR --check-tokens TEXTS IDS [--max-length N]\n");
}

int main(int argc, char **argv)
{
    const char *model_dir = NULL, *texts = NULL, *ref_ids = NULL;
    int threads = 1, runs = 5, max_length = 128, n_work = 0, status = 1, serve = 0;
    bert_precision precision = BERT_FP32;
    work works[MAX_WORK];
    char err[SM_ERR_MAX];
    memset(works, 0, sizeof works);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v) model_dir = argv[++i];
        else if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--runs") && v) runs = atoi(argv[++i]);
        else if (!strcmp(a, "--max-length") && v) max_length = atoi(argv[++i]);
        else if (!strcmp(a, "--serve")) serve = 1;
        else if (!strcmp(a, "--precision") && v && (!strcmp(v, "fp32") || !strcmp(v, "int8")))
            precision = !strcmp(argv[++i], "int8") ? BERT_INT8 : BERT_FP32;
        else if (!strcmp(a, "--check-tokens") && v && i + 2 < argc) {
            texts = argv[++i];
            ref_ids = argv[++i];
        } else if (a[0] != '-' && n_work < MAX_WORK) {
            work *w = &works[n_work];
            char *spec = strdup(a), *save = NULL;
            char *name = strtok_r(spec, ":", &save), *batch = strtok_r(NULL, ":", &save);
            char *ids = strtok_r(NULL, ":", &save), *probs = strtok_r(NULL, ":", &save);
            if (!name || !batch || !ids || atoi(batch) < 1) {
                usage();
                return 2;
            }
            snprintf(w->name, sizeof w->name, "%s", name);
            w->batch = atoi(batch);
            w->ids_path = ids;
            w->probs_path = probs;
            n_work++; /* spec stays allocated: the paths point into it */
        } else {
            usage();
            return 2;
        }
    }
    if (!model_dir || threads < 1 || runs < 1 || runs > MAX_RUNS || max_length < 2) {
        usage();
        return 2;
    }
    const char *precision_name = precision == BERT_INT8 ? "int8" : "fp32";
    if (precision == BERT_INT8 && !backend_cpu_pack_native(BACKEND_PACK_INT8)) {
        printf("{\"engine\": \"ours\", \"precision\": \"int8\", \"available\": false, "
               "\"error\": \"not available on this CPU: no AVX512-VNNI\"}\n");
        fprintf(stderr, "bench_peers: --precision int8: this CPU has no AVX512-VNNI\n");
        return EXIT_UNAVAILABLE;
    }

    bert_model *m = NULL;
    backend *be = NULL;
    bert_workspace *ws = NULL;
    bert_packed_params *pp = NULL;
    const bert_params *run_p = NULL;
    float *probs = NULL;
    double pack_s = 0;
    if (bert_model_load_dir(model_dir, &m, err)) goto fail;
    if (!m->has_head) {
        fprintf(stderr, "bench_peers: %s has no classification head\n", model_dir);
        goto end;
    }
    if (texts) {
        status = check_tokens(m, texts, ref_ids, max_length);
        goto end;
    }
    int max_batch = 1, max_T = 2, K = m->cfg.num_labels;
    for (int i = 0; i < n_work; i++) {
        if (load_work(&works[i], &m->cfg, tokenizer_pad_id(m->tok))) goto end;
        max_batch = works[i].batch > max_batch ? works[i].batch : max_batch;
        for (int k = 0; k < works[i].n_batches; k++)
            max_T = works[i].T[k] > max_T ? works[i].T[k] : max_T;
    }
    run_p = &m->p;
    /* fp32 runs what the extension runs: the packed FP32 weights where
     * this CPU has AVX-512F (backend_cpu_fp32_packed), else OpenBLAS */
    if (precision == BERT_FP32 && backend_cpu_fp32_packed()) precision = BERT_FP32_PACKED;
    if (precision == BERT_FP32_PACKED) precision_name = "fp32-packed";
    if (blas_load(err)) goto fail;
    if (backend_cpu_create(threads, &be, err)) goto fail;
    if (precision != BERT_FP32) {
        bert_precision plan[BERT_PACK_N];
        bert_pack_plan(precision, plan);
        double t0 = now();
        if (bert_params_pack(be, &m->cfg, &m->p, plan, &pp, err)) goto fail;
        pack_s = now() - t0;
        run_p = &pp->p;
    }
    if (bert_workspace_create(be, &m->cfg, max_batch, max_T, &ws, err)) goto fail;
    probs = malloc((size_t)max_batch * K * sizeof *probs);
    printf("{\"engine\": \"ours\", \"precision\": \"%s\", \"pack_s\": %.6f, \"blas\": \"%s\", "
           "\"threads\": %d, \"backend_threads\": %d}\n",
           precision_name, pack_s, blas_describe(), threads, backend_cpu_threads(be));
    fflush(stdout);

    if (serve) {
        /* Commands on stdin, one a line: "warm NAME", "run NAME", "quit".
         * Each answers one JSON line. */
        char *line = NULL;
        size_t cap = 0;
        printf("{\"ready\": true}\n");
        fflush(stdout);
        while (read_line(stdin, &line, &cap)) {
            char cmd[16] = "", name[64] = "";
            if (sscanf(line, "%15s %63s", cmd, name) < 1 || !strcmp(cmd, "quit")) break;
            work *w = NULL;
            for (int i = 0; i < n_work; i++)
                if (!strcmp(works[i].name, name)) w = &works[i];
            if (!w || (strcmp(cmd, "warm") && strcmp(cmd, "run"))) {
                printf("{\"error\": \"unknown command '%s %s'\"}\n", cmd, name);
                fflush(stdout);
                continue;
            }
            double t;
            if (!strcmp(cmd, "warm") ? warm_up(m, run_p, ws, w, probs, &t, err)
                                     : one_pass(m, run_p, ws, w, probs, &t, err)) {
                free(line);
                goto fail;
            }
            printf("{\"work\": \"%s\", \"%s\": %.6f}\n", w->name,
                   strcmp(cmd, "warm") ? "time" : "warmup_s", t);
            fflush(stdout);
        }
        free(line);
        status = 0;
        goto end;
    }
    for (int i = 0; i < n_work; i++) {
        work *w = &works[i];
        double times[MAX_RUNS], warm;
        if (warm_up(m, run_p, ws, w, probs, &warm, err)) goto fail;
        for (int r = 0; r < runs; r++)
            if (one_pass(m, run_p, ws, w, probs, &times[r], err)) goto fail;
        printf("{\"engine\": \"ours\", \"precision\": \"%s\", \"work\": \"%s\", \"batch\": %d, "
               "\"threads\": %d, \"seqs\": %d, \"warmup_s\": %.6f, \"times\": [",
               precision_name, w->name, w->batch, threads, w->n, warm);
        for (int r = 0; r < runs; r++) printf("%s%.6f", r ? ", " : "", times[r]);
        printf("]}\n");
        fflush(stdout);
    }
    status = 0;
    goto end;
fail:
    fprintf(stderr, "bench_peers: %s\n", err);
    status = 1;
end:
    free(probs);
    for (int i = 0; i < n_work; i++) work_free(&works[i]);
    if (ws) bert_workspace_free(ws);
    if (be) be->destroy(be);
    bert_packed_params_free(pp);
    if (m) bert_model_free(m);
    return status;
}
