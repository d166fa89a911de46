/* test_json_faults.c: every allocation a JSON parser makes can fail.
 *
 * For each parser (jansson, cJSON, and model/format/json_in.c, the one we parse
 * outside bytes with) and each input below, parses the input with the Nth
 * allocation failing, for N = 1, 2, ... until a parse makes fewer than N
 * allocations. Each parse runs in a child process, so a parser that aborts or
 * crashes is counted, not fatal. An outcome is one of:
 *   crash  the child died of a signal (jansson's lex_scan_string assert)
 *   wrong  the parse "succeeded" with a tree that differs from the real one
 *   error  the parse failed (for json_in: with SM_ERR_NOMEM, nothing leaked)
 *   right  the parse succeeded with the right tree despite the failure
 * jansson's and cJSON's figures are printed (they are why json_in exists);
 * json_in must never crash, never be wrong, and every failure must be a clean
 * out-of-memory error that frees what it allocated. Run from the repository
 * root. FAULTS_VERBOSE=1 prints each failing N.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/errors.h"
#include "format/json_in.h"

/* ---- a counting allocator that fails the armed Nth call ------------------ */

static long g_countdown; /* > 0: the call that brings it to 0 fails */
static long g_calls;     /* allocations since arming */
static long g_live;      /* blocks allocated and not yet freed */
static int g_failed;

static void *count_malloc(size_t n)
{
    g_calls++;
    if (g_countdown > 0 && --g_countdown == 0) {
        g_failed = 1;
        return NULL;
    }
    void *p = malloc(n);
    if (p) g_live++;
    return p;
}

static void count_free(void *p)
{
    if (p) g_live--;
    free(p);
}

static void arm(long n)
{
    g_countdown = n;
    g_calls = 0;
    g_failed = 0;
}

/* ---- the parsers, behind one shape --------------------------------------- */

/* Parses text; returns a malloc'd canonical rendering of the tree (made with
 * failures off), or NULL when the parse failed. *oom_error: the failure was
 * reported as out of memory. *leaked: blocks left allocated after freeing. */
typedef char *(*parse_fn)(const char *text, size_t len, int *oom_error,
                          long *leaked);

static char *parse_jansson(const char *text, size_t len, int *oom_error,
                           long *leaked)
{
    json_error_t jerr;
    long live0 = g_live;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    g_countdown = 0;
    char *out = NULL;
    if (!root) {
        *oom_error = json_error_code(&jerr) == json_error_out_of_memory;
    } else {
        char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        out = strdup(s ? s : "(dump failed)");
        free(s);
        json_decref(root);
    }
    *leaked = g_live - live0;
    return out;
}

/* Renders a cJSON tree with sorted keys, like json_dumps(JSON_SORT_KEYS). */
static int cmp_cjson_key(const void *a, const void *b)
{
    return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

static void render_cjson(const cJSON *v, FILE *f)
{
    if (cJSON_IsObject(v)) {
        int n = cJSON_GetArraySize(v), i = 0;
        const cJSON **kids = malloc((size_t)(n + 1) * sizeof *kids);
        for (const cJSON *c = v->child; c; c = c->next) kids[i++] = c;
        qsort(kids, (size_t)n, sizeof *kids, cmp_cjson_key);
        fputc('{', f);
        for (i = 0; i < n; i++) {
            fprintf(f, "%s\"%s\":", i ? "," : "", kids[i]->string);
            render_cjson(kids[i], f);
        }
        fputc('}', f);
        free(kids);
    } else if (cJSON_IsArray(v)) {
        fputc('[', f);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) fputc(',', f);
            render_cjson(c, f);
        }
        fputc(']', f);
    } else if (cJSON_IsString(v)) {
        fprintf(f, "\"%s\"", v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        fprintf(f, "%.17g", v->valuedouble);
    } else {
        fputs(cJSON_IsTrue(v) ? "true" : cJSON_IsFalse(v) ? "false" : "null", f);
    }
}

static char *parse_cjson(const char *text, size_t len, int *oom_error,
                         long *leaked)
{
    long live0 = g_live;
    cJSON *root = cJSON_ParseWithLength(text, len);
    g_countdown = 0;
    char *out = NULL;
    *oom_error = 0; /* cJSON does not say why it failed */
    if (root) {
        size_t n = 0;
        FILE *f = open_memstream(&out, &n);
        render_cjson(root, f);
        fclose(f);
        cJSON_Delete(root);
    }
    *leaked = g_live - live0;
    return out;
}

/* Renders a json_in tree canonically: members in key order (json_in keeps
 * them sorted), numbers as written. */
static void render_in(const json_in_value *v, FILE *f)
{
    switch (v->type) {
    case JSON_IN_OBJECT:
        fputc('{', f);
        for (size_t i = 0; i < v->n; i++) {
            fprintf(f, "%s\"%s\":", i ? "," : "", v->members[i].key);
            render_in(&v->members[i].value, f);
        }
        fputc('}', f);
        break;
    case JSON_IN_ARRAY:
        fputc('[', f);
        for (size_t i = 0; i < v->n; i++) {
            if (i) fputc(',', f);
            render_in(&v->items[i], f);
        }
        fputc(']', f);
        break;
    case JSON_IN_STRING:
        fputc('"', f);
        fwrite(v->str, 1, v->n, f);
        fputc('"', f);
        break;
    case JSON_IN_NUMBER:
        if (v->is_int)
            fprintf(f, "%lld", (long long)v->i);
        else
            fprintf(f, "%.17g", v->d);
        break;
    case JSON_IN_TRUE: fputs("true", f); break;
    case JSON_IN_FALSE: fputs("false", f); break;
    case JSON_IN_NULL: fputs("null", f); break;
    }
}

static char *parse_json_in(const char *text, size_t len, int *oom_error,
                           long *leaked)
{
    json_in_error err;
    json_in_doc *doc = NULL;
    long live0 = g_live;
    int rc = json_in_parse(text, len, &doc, &err);
    g_countdown = 0;
    char *out = NULL;
    *oom_error = rc == SM_ERR_NOMEM && !doc;
    if (rc == SM_OK) {
        size_t n = 0;
        FILE *f = open_memstream(&out, &n);
        render_in(json_in_root(doc), f);
        fclose(f);
    }
    json_in_free(doc);
    *leaked = g_live - live0;
    return out;
}

static const struct {
    const char *name;
    parse_fn parse;
} k_parsers[] = {
    {"jansson", parse_jansson},
    {"cJSON", parse_cjson},
    {"json_in", parse_json_in},
};
enum { P_JANSSON, P_CJSON, P_JSON_IN, N_PARSERS };

static void install_hooks(void)
{
    json_set_alloc_funcs(count_malloc, count_free);
    cJSON_Hooks h = {count_malloc, count_free};
    cJSON_InitHooks(&h);
    json_in_set_alloc_funcs(count_malloc, count_free);
}

/* ---- the inputs ---------------------------------------------------------- */

typedef struct input {
    const char *name;
    char *text;
    size_t len;
} input;

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

/* The header of a real safetensors file. */
static char *safetensors_header(const char *path, size_t *len)
{
    size_t n;
    char *file = read_all(path, &n);
    uint64_t h = 0;
    assert_true(n >= 8);
    for (int i = 7; i >= 0; i--) h = h << 8 | (uint8_t)file[i];
    assert_true(h <= n - 8);
    char *hdr = malloc(h + 1);
    memcpy(hdr, file + 8, h);
    hdr[h] = 0;
    free(file);
    *len = h;
    return hdr;
}

static char *dup_text(const char *s, size_t *len)
{
    *len = strlen(s);
    return strdup(s);
}

static char *deep_nesting(size_t *len)
{
    enum { DEPTH = 60 };
    char *s = malloc(4 * DEPTH + 16), *p = s;
    for (int i = 0; i < DEPTH; i++) p += sprintf(p, i % 2 ? "{\"k\":" : "[");
    p += sprintf(p, "1");
    for (int i = DEPTH - 1; i >= 0; i--) *p++ = i % 2 ? '}' : ']';
    *p = 0;
    *len = (size_t)(p - s);
    return s;
}

static char *many_keys(size_t *len)
{
    enum { KEYS = 400 };
    char *s = malloc(KEYS * 40 + 8), *p = s;
    *p++ = '{';
    for (int i = 0; i < KEYS; i++)
        p += sprintf(p, "%s\"key%d\":[%d,\"v\\u00e9%d\"]", i ? "," : "", i, i, i);
    *p++ = '}';
    *p = 0;
    *len = (size_t)(p - s);
    return s;
}

static char *long_string(size_t *len)
{
    enum { N = 3000 };
    char *s = malloc(N * 8 + 16), *p = s;
    p += sprintf(p, "[\"");
    for (int i = 0; i < N; i++) p += sprintf(p, i % 3 ? "\\u4e2d" : i % 2 ? "\\n" : "ab");
    p += sprintf(p, "\"]");
    *len = (size_t)(p - s);
    return s;
}

static input *g_inputs;
static int g_n_inputs;

static void make_inputs(void)
{
    static input in[9];
    int n = 0;
    in[n].name = "bert_tiny safetensors header";
    in[n].text = safetensors_header("tests/fixtures/models/bert_tiny/model.safetensors",
                                    &in[n].len);
    n++;
    in[n].name = "ernie_tiny config.json";
    in[n].text = read_all("tests/fixtures/models/ernie_tiny/config.json", &in[n].len);
    n++;
    in[n].name = "train options";
    in[n].text = dup_text("{\"base\":\"none\",\"epochs\":2,\"lr\":0.0005,\"batch_size\":16,"
                          "\"vocab\":\"/tmp/vocab.txt\",\"group_by_length\":true,"
                          "\"seed\":12345678901,\"valid_fraction\":0.1}",
                          &in[n].len);
    n++;
    in[n].name = "escapes and surrogates";
    in[n].text = dup_text("{\"a\\u00e9\\n\":\"\\ud83d\\ude00 x\\t\\\"\\\\ \\u4e2d\\u6587\","
                          "\"b\":[\"\\/\",\"\\b\\f\\r\",\"中文\"],\"\\ud834\\udd1e\":null}",
                          &in[n].len);
    n++;
    in[n].name = "deep nesting";
    in[n].text = deep_nesting(&in[n].len);
    n++;
    in[n].name = "numbers";
    in[n].text = dup_text("[0,-1,1.5,1e-12,-2.5E+3,9007199254740991,123456789012,0.1,"
                          "3.0,-0,1E2,true,false,null,[],{}]",
                          &in[n].len);
    n++;
    in[n].name = "400 keys";
    in[n].text = many_keys(&in[n].len);
    n++;
    in[n].name = "long string";
    in[n].text = long_string(&in[n].len);
    n++;
    g_inputs = in;
    g_n_inputs = n;
}

/* ---- the sweep ----------------------------------------------------------- */

/* Exit statuses of a child, from 10 up so that nothing else (a sanitizer's
 * exit status 1) reads as one of them. */
enum { O_UNTOUCHED = 10, O_RIGHT, O_ERROR, O_WRONG, O_CRASH, O_LEAK, O_END };
#define N_OUTCOMES O_END

/* In a child: a crash must end the child, not reach cmocka's handlers
 * (which would go on running the other tests there). */
static void default_signals(void)
{
    static const int sigs[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], SIG_DFL);
}

/* One parse with allocation n failing, in a child; the outcome. */
static int run_one(int p, const input *in, const char *want, long n)
{
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        default_signals();
        int oom = 0;
        long leaked = 0;
        if (p != P_JSON_IN) /* glibc's heap-corruption reports: counted, not shown */
            (void)!freopen("/dev/null", "w", stderr);
        arm(n);
        char *got = k_parsers[p].parse(in->text, in->len, &oom, &leaked);
        if (!g_failed) _exit(O_UNTOUCHED);
        if (!got && p == P_JSON_IN && !oom) _exit(O_WRONG); /* a false error */
        if (!got) _exit(leaked ? O_LEAK : O_ERROR);
        _exit(strcmp(got, want) ? O_WRONG : O_RIGHT);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFSIGNALED(st) || !WIFEXITED(st) || WEXITSTATUS(st) < O_UNTOUCHED ||
        WEXITSTATUS(st) >= O_END)
        return O_CRASH; /* a signal, or an exit of its own (a sanitizer's report) */
    return WEXITSTATUS(st);
}

static const char *const k_outcome[N_OUTCOMES] = {
    [O_UNTOUCHED] = "untouched", [O_RIGHT] = "right", [O_ERROR] = "error",
    [O_WRONG] = "wrong",         [O_CRASH] = "crash", [O_LEAK] = "leak"};

/* Sweeps parser p over every input; totals per outcome in tot. */
static void sweep(int p, long tot[N_OUTCOMES])
{
    int verbose = getenv("FAULTS_VERBOSE") != NULL;
    for (int i = 0; i < g_n_inputs; i++) {
        const input *in = &g_inputs[i];
        int oom;
        long leaked;
        arm(0);
        char *want = k_parsers[p].parse(in->text, in->len, &oom, &leaked);
        if (!want) fail_msg("%s rejects '%s' with no failure", k_parsers[p].name, in->name);
        long c[N_OUTCOMES] = {0}, n;
        for (n = 1;; n++) {
            int o = run_one(p, in, want, n);
            if (o == O_UNTOUCHED) break;
            c[o]++;
            if (verbose && o != O_ERROR)
                print_message("  %s, %s: allocation %ld failing: %s\n", k_parsers[p].name,
                              in->name, n, k_outcome[o]);
        }
        print_message("%-8s %-30s %5ld allocations: %ld crash, %ld wrong, %ld error, "
                      "%ld right, %ld leak\n",
                      k_parsers[p].name, in->name, n - 1, c[O_CRASH], c[O_WRONG], c[O_ERROR],
                      c[O_RIGHT], c[O_LEAK]);
        for (int o = O_UNTOUCHED; o < N_OUTCOMES; o++) tot[o] += c[o];
        free(want);
    }
}

static void test_jansson_figures(void **state)
{
    (void)state;
    long t[N_OUTCOMES] = {0};
    sweep(P_JANSSON, t);
    print_message("jansson total: %ld crash, %ld wrong, %ld error\n", t[O_CRASH],
                  t[O_WRONG], t[O_ERROR]);
}

static void test_cjson_figures(void **state)
{
    (void)state;
    long t[N_OUTCOMES] = {0};
    sweep(P_CJSON, t);
    print_message("cJSON total: %ld crash, %ld wrong, %ld error\n", t[O_CRASH], t[O_WRONG],
                  t[O_ERROR]);
}

/* The parser we use: never a crash, a wrong tree, a false error or a leak. */
static void test_json_in_every_allocation_can_fail(void **state)
{
    (void)state;
    long t[N_OUTCOMES] = {0};
    sweep(P_JSON_IN, t);
    print_message("json_in total: %ld crash, %ld wrong, %ld error, %ld leak\n", t[O_CRASH],
                  t[O_WRONG], t[O_ERROR], t[O_LEAK]);
    assert_int_equal(t[O_CRASH], 0);
    assert_int_equal(t[O_WRONG], 0);
    assert_int_equal(t[O_LEAK], 0);
    assert_true(t[O_ERROR] > 0); /* the sweep did fail allocations */
}

int main(void)
{
    install_hooks();
    make_inputs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jansson_figures),
        cmocka_unit_test(test_cjson_figures),
        cmocka_unit_test(test_json_in_every_allocation_can_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
