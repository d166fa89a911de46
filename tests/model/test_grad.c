/* test_grad.c: every backward op against central finite differences.
 *
 * For each op the test holds a double-precision reference of the forward,
 * takes L = Σ r·out with random weights r (so dL/dout = r), and compares the
 * CPU backend's float backward with (L(x+h) - L(x-h)) / 2h of the double
 * reference, element by element: |ours - fd| <= 1e-3 * max(|fd|, rms of fd
 * over that input). The double reference's forward is also checked against
 * the backend's forward, so the two describe the same function. Ops:
 * linear, layernorm, GELU, tanh pooler, attention with padding (with and
 * without dropout), embeddings, dropout, cross-entropy, the distillation
 * loss (soft targets, temperature, rows without a label); then the whole tiny
 * model's loss, with dropout on, w.r.t. a sample of parameters in every
 * tensor (float model, looser tolerance).
 */
#define GRAD_SEED 12345
#include "support/grad_test_util.h"

#include "encoder/bert.h"
#include "train/bert_train.h"

static void check_forward(const char *what, const float *ours, const double *ref, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(ours[i] - ref[i]) <= 1e-4 * (1 + fabs(ref[i]))))
            fail_msg("%s forward [%zu]: backend %.9g, reference %.9g", what, i, (double)ours[i],
                     ref[i]);
}

static double dot(const double *r, const double *y, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += r[i] * y[i];
    return s;
}

/* ---- linear (+ tanh: the pooler) ----------------------------------------- */

typedef struct lin_ctx {
    int R, K, N, with_tanh;
    double *in, *W, *b, *r, *out;
} lin_ctx;

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    for (int i = 0; i < c->R; i++)
        for (int o = 0; o < c->N; o++) {
            double s = c->b[o];
            for (int k = 0; k < c->K; k++) s += c->in[i * c->K + k] * c->W[o * c->K + k];
            c->out[i * c->N + o] = c->with_tanh ? tanh(s) : s;
        }
    return dot(c->r, c->out, (size_t)c->R * c->N);
}

static void check_linear(int with_tanh)
{
    int R = 5, K = 7, N = 6;
    float *in = frand((size_t)R * K, 1), *W = frand((size_t)N * K, 0.5), *b = frand(N, 0.5);
    float *r = frand((size_t)R * N, 1), *out = calloc((size_t)R * N, sizeof *out);
    float *din = calloc((size_t)R * K, sizeof *din), *dW = calloc((size_t)N * K, sizeof *dW);
    float *db = calloc(N, sizeof *db), *dout = malloc((size_t)R * N * sizeof *dout);
    memcpy(dout, r, (size_t)R * N * sizeof *dout);
    assert_int_equal(g_be->linear(g_be, out, in, W, b, R, K, N), SM_OK);
    if (with_tanh) {
        assert_int_equal(g_be->tanh(g_be, out, out, (size_t)R * N), SM_OK);
        assert_int_equal(g_be->tanh_backward(g_be, dout, dout, out, (size_t)R * N), SM_OK);
    }
    /* dW, db accumulate: start them at 1 and subtract it after. */
    for (int i = 0; i < N * K; i++) dW[i] = 1.0f;
    for (int i = 0; i < N; i++) db[i] = 1.0f;
    assert_int_equal(g_be->linear_backward(g_be, din, dW, db, dout, in, W, R, K, N, 0), SM_OK);
    for (int i = 0; i < N * K; i++) dW[i] -= 1.0f;
    for (int i = 0; i < N; i++) db[i] -= 1.0f;

    lin_ctx c = {R, K, N, with_tanh, to_double(in, (size_t)R * K), to_double(W, (size_t)N * K),
                 to_double(b, N), to_double(r, (size_t)R * N), calloc((size_t)R * N, sizeof(double))};
    lin_loss(&c);
    check_forward(with_tanh ? "pooler" : "linear", out, c.out, (size_t)R * N);
    check_grad(with_tanh ? "pooler d(in)" : "linear d(in)", c.in, (size_t)R * K, din, lin_loss, &c);
    check_grad(with_tanh ? "pooler d(W)" : "linear d(W)", c.W, (size_t)N * K, dW, lin_loss, &c);
    check_grad(with_tanh ? "pooler d(b)" : "linear d(b)", c.b, N, db, lin_loss, &c);

    /* accumulate_din adds to what din held. */
    float *din2 = malloc((size_t)R * K * sizeof *din2);
    for (int i = 0; i < R * K; i++) din2[i] = 2.0f;
    assert_int_equal(g_be->linear_backward(g_be, din2, dW, NULL, dout, in, W, R, K, N, 1), SM_OK);
    for (int i = 0; i < R * K; i++) assert_true(fabsf(din2[i] - 2.0f - din[i]) <= 1e-5f);

    free(din2);
    free(c.in), free(c.W), free(c.b), free(c.r), free(c.out);
    free(in), free(W), free(b), free(r), free(out), free(din), free(dW), free(db), free(dout);
}

static void test_linear(void **state)
{
    (void)state;
    check_linear(0);
}

static void test_pooler_tanh(void **state)
{
    (void)state;
    check_linear(1);
}

/* ---- layernorm ----------------------------------------------------------- */

typedef struct ln_ctx {
    int R, C;
    double eps, *in, *w, *b, *r, *out;
} ln_ctx;

static double ln_loss(void *p)
{
    ln_ctx *c = p;
    for (int i = 0; i < c->R; i++) {
        const double *x = c->in + (size_t)i * c->C;
        double mean = 0, var = 0;
        for (int k = 0; k < c->C; k++) mean += x[k];
        mean /= c->C;
        for (int k = 0; k < c->C; k++) var += (x[k] - mean) * (x[k] - mean);
        double rstd = 1 / sqrt(var / c->C + c->eps);
        for (int k = 0; k < c->C; k++)
            c->out[i * c->C + k] = (x[k] - mean) * rstd * c->w[k] + c->b[k];
    }
    return dot(c->r, c->out, (size_t)c->R * c->C);
}

static void test_layernorm(void **state)
{
    (void)state;
    int R = 4, C = 16;
    float eps = 1e-5f;
    float *in = frand((size_t)R * C, 2), *w = frand(C, 1), *b = frand(C, 1);
    float *r = frand((size_t)R * C, 1), *out = malloc((size_t)R * C * sizeof *out);
    float mean[4], rstd[4];
    float *dw = calloc(C, sizeof *dw), *db = calloc(C, sizeof *db);
    float *d = malloc((size_t)R * C * sizeof *d);
    memcpy(d, r, (size_t)R * C * sizeof *d);
    assert_int_equal(g_be->layernorm(g_be, out, mean, rstd, in, w, b, R, C, eps), SM_OK);
    /* in place: din aliases dout */
    assert_int_equal(g_be->layernorm_backward(g_be, d, dw, db, d, in, mean, rstd, w, R, C), SM_OK);
    ln_ctx c = {R, C, eps, to_double(in, (size_t)R * C), to_double(w, C), to_double(b, C),
                to_double(r, (size_t)R * C), calloc((size_t)R * C, sizeof(double))};
    ln_loss(&c);
    check_forward("layernorm", out, c.out, (size_t)R * C);
    check_grad("layernorm d(in)", c.in, (size_t)R * C, d, ln_loss, &c);
    check_grad("layernorm d(w)", c.w, C, dw, ln_loss, &c);
    check_grad("layernorm d(b)", c.b, C, db, ln_loss, &c);
    free(c.in), free(c.w), free(c.b), free(c.r), free(c.out);
    free(in), free(w), free(b), free(r), free(out), free(dw), free(db), free(d);
}

/* ---- GELU ---------------------------------------------------------------- */

typedef struct gelu_ctx {
    size_t n;
    double *in, *r, *out;
} gelu_ctx;

static double gelu_loss(void *p)
{
    gelu_ctx *c = p;
    for (size_t i = 0; i < c->n; i++) c->out[i] = 0.5 * c->in[i] * (1 + erf(c->in[i] / sqrt(2.0)));
    return dot(c->r, c->out, c->n);
}

static void test_gelu(void **state)
{
    (void)state;
    size_t n = 64;
    float *in = frand(n, 4), *r = frand(n, 1), *out = malloc(n * sizeof *out);
    float *d = malloc(n * sizeof *d);
    assert_int_equal(g_be->gelu(g_be, out, in, n), SM_OK);
    assert_int_equal(g_be->gelu_backward(g_be, d, r, in, n), SM_OK);
    gelu_ctx c = {n, to_double(in, n), to_double(r, n), calloc(n, sizeof(double))};
    gelu_loss(&c);
    check_forward("gelu", out, c.out, n);
    check_grad("gelu d(in)", c.in, n, d, gelu_loss, &c);
    free(c.in), free(c.r), free(c.out);
    free(in), free(r), free(out), free(d);
}

/* ---- attention ----------------------------------------------------------- */

typedef struct att_ctx {
    int B, T, H, d;
    const int *lengths;
    double scale, p;
    uint64_t key;
    double *qkv, *r, *out;
} att_ctx;

static double att_loss(void *ptr)
{
    att_ctx *c = ptr;
    int B = c->B, T = c->T, H = c->H, d = c->d, C = H * d;
    uint32_t thr = dropout_threshold((float)c->p);
    double P[64];
    memset(c->out, 0, (size_t)B * T * C * sizeof *c->out);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int len = c->lengths[b];
            for (int i = 0; i < len; i++) {
                const double *q = c->qkv + ((size_t)b * T + i) * 3 * C + h * d;
                double mx = -1e300, sum = 0;
                for (int j = 0; j < len; j++) {
                    const double *k = c->qkv + ((size_t)b * T + j) * 3 * C + C + h * d;
                    double s = 0;
                    for (int e = 0; e < d; e++) s += q[e] * k[e];
                    P[j] = s * c->scale;
                    mx = P[j] > mx ? P[j] : mx;
                }
                for (int j = 0; j < len; j++) sum += (P[j] = exp(P[j] - mx));
                for (int j = 0; j < len; j++) {
                    double pj = P[j] / sum;
                    if (c->p > 0) {
                        size_t at = (((size_t)b * H + h) * T + i) * T + j;
                        pj = dropout_keep(c->key, at, thr) ? pj / (1 - c->p) : 0;
                    }
                    const double *v = c->qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * d;
                    double *o = c->out + ((size_t)b * T + i) * C + h * d;
                    for (int e = 0; e < d; e++) o[e] += pj * v[e];
                }
            }
        }
    return dot(c->r, c->out, (size_t)B * T * C);
}

static void check_attention(float p)
{
    int B = 3, T = 6, H = 2, d = 4, C = H * d, lengths[3] = {6, 3, 1};
    size_t N = (size_t)B * T, att_n = (size_t)B * H * T * T;
    float scale = 1.0f / sqrtf((float)d);
    uint64_t key = dropout_key(99, 1, 2);
    float *qkv = frand(N * 3 * C, 1.5), *r = frand(N * C, 1);
    float *out = malloc(N * C * sizeof *out), *att = malloc(att_n * sizeof *att);
    float *att_drop = malloc(att_n * sizeof *att_drop), *datt = malloc(att_n * sizeof *datt);
    float *dqkv = malloc(N * 3 * C * sizeof *dqkv);
    for (size_t i = 0; i < N * 3 * C; i++) dqkv[i] = NAN; /* all must be written */
    assert_int_equal(g_be->attention_train(g_be, out, att, att_drop, qkv, lengths, B, T, H, d,
                                           scale, p, key), SM_OK);
    assert_int_equal(g_be->attention_backward(g_be, dqkv, datt, att_drop, r, att, qkv, lengths,
                                              B, T, H, d, scale, p, key), SM_OK);
    att_ctx c = {B, T, H, d, lengths, scale, p, key, to_double(qkv, N * 3 * C),
                 to_double(r, N * C), calloc(N * C, sizeof(double))};
    att_loss(&c);
    check_forward(p > 0 ? "attention+dropout" : "attention", out, c.out, N * C);
    check_grad(p > 0 ? "attention+dropout d(qkv)" : "attention d(qkv)", c.qkv, N * 3 * C, dqkv,
               att_loss, &c);
    if (p == 0) {
        /* Without dropout it is the inference op, exactly. */
        float *out2 = malloc(N * C * sizeof *out2);
        assert_int_equal(g_be->attention(g_be, out2, att, qkv, lengths, B, T, H, d, scale), SM_OK);
        for (size_t i = 0; i < N * C; i++) assert_true(fabsf(out2[i] - out[i]) <= 1e-6f);
        free(out2);
    }
    free(c.qkv), free(c.r), free(c.out);
    free(qkv), free(r), free(out), free(att), free(att_drop), free(datt), free(dqkv);
}

static void test_attention(void **state)
{
    (void)state;
    check_attention(0.0f);
}

static void test_attention_dropout(void **state)
{
    (void)state;
    check_attention(0.3f);
}

/* ---- embeddings ---------------------------------------------------------- */

typedef struct emb_ctx {
    int B, T, C, off;
    const int *ids;
    double *word, *pos, *type, *task, *r, *out;
} emb_ctx;

static double emb_loss(void *p)
{
    emb_ctx *c = p;
    for (int bt = 0; bt < c->B * c->T; bt++)
        for (int k = 0; k < c->C; k++)
            c->out[bt * c->C + k] = c->word[c->ids[bt] * c->C + k] +
                                    c->pos[(bt % c->T + c->off) * c->C + k] + c->type[k] +
                                    c->task[k];
    return dot(c->r, c->out, (size_t)c->B * c->T * c->C);
}

static void test_embedding(void **state)
{
    (void)state;
    int V = 10, P = 8, C = 5, B = 2, T = 4, off = 2;
    int ids[8] = {1, 4, 4, 0, 7, 1, 9, 4}; /* repeats: the scatter must add */
    float *word = frand((size_t)V * C, 1), *pos = frand((size_t)P * C, 1);
    float *type = frand(2 * (size_t)C, 1), *task = frand(3 * (size_t)C, 1);
    float *r = frand((size_t)B * T * C, 1), *out = malloc((size_t)B * T * C * sizeof *out);
    float *dword = calloc((size_t)V * C, 4), *dpos = calloc((size_t)P * C, 4);
    float *dtype = calloc(2 * (size_t)C, 4), *dtask = calloc(3 * (size_t)C, 4);
    assert_int_equal(g_be->embed(g_be, out, ids, NULL, word, pos, type, task, B, T, C, off), SM_OK);
    assert_int_equal(g_be->embed_backward(g_be, dword, dpos, dtype, dtask, r, ids, NULL, B, T, C, off),
                     SM_OK);
    emb_ctx c = {B, T, C, off, ids, to_double(word, (size_t)V * C), to_double(pos, (size_t)P * C),
                 to_double(type, 2 * (size_t)C), to_double(task, 3 * (size_t)C),
                 to_double(r, (size_t)B * T * C), calloc((size_t)B * T * C, sizeof(double))};
    emb_loss(&c);
    check_forward("embedding", out, c.out, (size_t)B * T * C);
    check_grad("embedding d(word)", c.word, (size_t)V * C, dword, emb_loss, &c);
    check_grad("embedding d(position)", c.pos, (size_t)P * C, dpos, emb_loss, &c);
    check_grad("embedding d(type)", c.type, 2 * (size_t)C, dtype, emb_loss, &c);
    check_grad("embedding d(task)", c.task, 3 * (size_t)C, dtask, emb_loss, &c);
    free(c.word), free(c.pos), free(c.type), free(c.task), free(c.r), free(c.out);
    free(word), free(pos), free(type), free(task), free(r), free(out);
    free(dword), free(dpos), free(dtype), free(dtask);
}

/* ---- dropout ------------------------------------------------------------- */

static void test_dropout(void **state)
{
    (void)state;
    size_t n = 100000;
    float p = 0.25f;
    uint64_t key = dropout_key(1, 2, 3);
    float *x = frand(n, 1), *y = malloc(n * sizeof *y), *y2 = malloc(n * sizeof *y2);
    assert_int_equal(g_be->dropout(g_be, y, x, n, p, key), SM_OK);
    assert_int_equal(g_be->dropout(g_be, y2, x, n, p, key), SM_OK);
    assert_memory_equal(y, y2, n * sizeof *y);
    size_t dropped = 0;
    for (size_t i = 0; i < n; i++) {
        if (y[i] == 0.0f) dropped++;
        else assert_true(fabsf(y[i] - x[i] / (1 - p)) <= 1e-6f * (1 + fabsf(x[i])));
    }
    /* about p of the elements, and a different key gives a different mask */
    assert_true(fabs((double)dropped / n - p) < 0.01);
    assert_int_equal(g_be->dropout(g_be, y2, x, n, p, dropout_key(1, 3, 3)), SM_OK);
    assert_memory_not_equal(y, y2, n * sizeof *y);
    /* p = 0 is the identity; in place works */
    assert_int_equal(g_be->dropout(g_be, y2, x, n, 0.0f, key), SM_OK);
    assert_memory_equal(y2, x, n * sizeof *x);
    /* The backward (same call on the gradient) is d(Σ r·y)/dx = mask * r / (1-p). */
    memcpy(y2, x, n * sizeof *x);
    assert_int_equal(g_be->dropout(g_be, y2, y2, n, p, key), SM_OK);
    assert_memory_equal(y2, y, n * sizeof *y);
    free(x), free(y), free(y2);
}

/* ---- cross-entropy ------------------------------------------------------- */

typedef struct ce_ctx {
    int B, K;
    const int *labels;
    double scale, *logits;
} ce_ctx;

static double ce_loss(void *p)
{
    ce_ctx *c = p;
    double total = 0;
    for (int b = 0; b < c->B; b++) {
        const double *z = c->logits + (size_t)b * c->K;
        double mx = z[0], s = 0;
        for (int k = 1; k < c->K; k++) mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < c->K; k++) s += exp(z[k] - mx);
        total += log(s) + mx - z[c->labels[b]];
    }
    return c->scale * total;
}

static void test_cross_entropy(void **state)
{
    (void)state;
    int B = 4, K = 3, labels[4] = {0, 2, 1, 2};
    float *logits = frand((size_t)B * K, 3), probs[12], losses[4], dlogits[12];
    float scale = 1.0f / B;
    assert_int_equal(g_be->cross_entropy(g_be, losses, probs, logits, labels, B, K), SM_OK);
    assert_int_equal(g_be->cross_entropy_backward(g_be, dlogits, probs, labels, B, K, scale), SM_OK);
    ce_ctx c = {B, K, labels, scale, to_double(logits, (size_t)B * K)};
    double want = ce_loss(&c), got = 0;
    for (int b = 0; b < B; b++) got += losses[b] * (double)scale;
    assert_true(fabs(got - want) <= 1e-6);
    check_grad("cross-entropy d(logits)", c.logits, (size_t)B * K, dlogits, ce_loss, &c);
    free(c.logits);
    free(logits);
}

/* ---- distillation loss ---------------------------------------------------- */

typedef struct kd_ctx {
    int B, K;
    const int *labels;
    const float *q;
    double T, alpha, scale;
    double *logits;
} kd_ctx;

/* The loss of backend.h's distill_loss in double: (1 - a) CE + a T^2 KL(q || softmax(z/T)). */
static double kd_loss(void *p)
{
    kd_ctx *c = p;
    double total = 0;
    for (int b = 0; b < c->B; b++) {
        const double *z = c->logits + (size_t)b * c->K;
        double mx = z[0], s = 0, st = 0;
        for (int k = 1; k < c->K; k++) mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < c->K; k++) s += exp(z[k] - mx), st += exp((z[k] - mx) / c->T);
        double hard = c->labels[b] >= 0 ? log(s) + mx - z[c->labels[b]] : 0, kl = 0;
        for (int k = 0; k < c->K; k++) {
            double q = c->q[(size_t)b * c->K + k];
            if (q > 0) kl += q * (log(q) - ((z[k] - mx) / c->T - log(st)));
        }
        total += (1 - c->alpha) * hard + c->alpha * c->T * c->T * kl;
    }
    return c->scale * total;
}

static void test_distill_loss(void **state)
{
    (void)state;
    int B = 5, K = 4, labels[5] = {0, -1, 3, 1, -1};
    float *logits = frand((size_t)B * K, 4), q[20], probs[20], probs_t[20], losses[5], dz[20];
    for (int b = 0; b < B; b++) {
        double sum = 0;
        for (int k = 0; k < K; k++) sum += q[b * K + k] = (float)(urand() + 1.05);
        for (int k = 0; k < K; k++) q[b * K + k] = (float)(q[b * K + k] / sum);
    }
    q[3] = 0; /* a zero target contributes nothing */
    q[0] = 1 - q[1] - q[2];
    float T = 2.5f, alpha = 0.7f, scale = 1.0f / B;
    assert_int_equal(g_be->distill_loss(g_be, losses, probs, probs_t, logits, labels, q, B, K, T,
                                        alpha), SM_OK);
    assert_int_equal(g_be->distill_backward(g_be, dz, probs, probs_t, labels, q, B, K, T, alpha,
                                            scale), SM_OK);
    kd_ctx c = {B, K, labels, q, T, alpha, scale, to_double(logits, (size_t)B * K)};
    double want = kd_loss(&c), got = 0;
    for (int b = 0; b < B; b++) got += losses[b] * (double)scale;
    assert_true(fabs(got - want) <= 1e-6 * (1 + fabs(want)));
    check_grad("distillation d(logits)", c.logits, (size_t)B * K, dz, kd_loss, &c);
    free(c.logits);
    free(logits);
}

/* ---- the whole tiny model, dropout on ------------------------------------ */

typedef struct model_ctx {
    bert_model *m;
    bert_train_ws *ws;
    int ids[4 * 12], lengths[4], labels[4], B, T;
    bert_dropout drop;
} model_ctx;

static double model_loss(model_ctx *c)
{
    char err[SM_ERR_MAX] = "";
    double loss;
    int rc = bert_train_forward(&c->m->cfg, &c->m->p, c->ws, c->ids, c->lengths, c->labels, c->B,
                                c->T, &c->drop, &loss, NULL, err);
    if (rc) fail_msg("%s", err);
    return loss / c->B;
}

static void test_whole_model(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    model_ctx c = {.B = 4, .T = 12};
    assert_int_equal(bert_model_load_dir("tests/fixtures/train/model", &c.m, err), SM_OK);
    assert_int_equal(bert_train_ws_create(g_be, &c.m->cfg, c.B, c.T, &c.ws, err), SM_OK);
    int lens[4] = {12, 7, 3, 9};
    for (int b = 0; b < c.B; b++) {
        c.lengths[b] = lens[b];
        c.labels[b] = b % c.m->cfg.num_labels;
        for (int t = 0; t < c.T; t++)
            c.ids[b * c.T + t] = t == 0 ? 2 : t < lens[b] ? 500 + (b * 37 + t * 11) % 600 : 0;
    }
    c.drop = (bert_dropout){0.1f, 0.1f, 0.1f, 7, 3};

    float *grads = calloc(c.m->n_floats, sizeof *grads);
    bert_params g;
    assert_int_equal(bert_params_bind(&c.m->cfg, 1, grads, &g, err), SM_OK);
    model_loss(&c);
    assert_int_equal(bert_train_backward(&c.m->cfg, &c.m->p, &g, c.ws, 1.0f / c.B, err), SM_OK);

    bert_param_spec *specs;
    int n;
    size_t total;
    assert_int_equal(bert_param_table(&c.m->cfg, 1, &specs, &n, &total, err), SM_OK);
    /* In every tensor, the element with the largest gradient and one at
     * random; float forward, so h is larger and the tolerance looser. */
    double worst = 0;
    int checked = 0;
    for (int i = 0; i < n; i++) {
        size_t best = 0;
        for (size_t k = 0; k < specs[i].numel; k++)
            if (fabsf(grads[specs[i].offset + k]) > fabsf(grads[specs[i].offset + best])) best = k;
        size_t pick[2] = {best, (size_t)((urand() + 1) / 2 * (double)specs[i].numel)};
        for (int j = 0; j < 2; j++) {
            size_t at = specs[i].offset + (pick[j] < specs[i].numel ? pick[j] : 0);
            float save = c.m->arena[at], h = 1e-2f;
            c.m->arena[at] = save + h;
            double lp = model_loss(&c);
            c.m->arena[at] = save - h;
            double lm = model_loss(&c);
            c.m->arena[at] = save;
            double fd = (lp - lm) / (2.0 * h), a = grads[at];
            double err_abs = fabs(a - fd);
            if (!(err_abs <= 2e-2 * fabs(fd) + 3e-5))
                fail_msg("model d(%s)[%zu]: backward %.7g, finite difference %.7g", specs[i].name,
                         at - specs[i].offset, a, fd);
            if (fabs(fd) > 1e-3 && err_abs / fabs(fd) > worst) worst = err_abs / fabs(fd);
            checked++;
        }
    }
    print_message("  whole model (dropout 0.1)    %5d parameters, worst relative %.1e\n", checked,
                  worst);
    free(specs);
    bert_params_release(&g);
    free(grads);
    bert_train_ws_free(c.ws);
    bert_model_free(c.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_pooler_tanh),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_dropout),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_distill_loss),
        cmocka_unit_test(test_whole_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
