/* embed.c: sentence embeddings from SQL.
 *
 *   sentiment_embed(text [, model [, prompt]])  -> BLOB   the model's pooled
 *                                                         embedding of text
 *
 *   SELECT sentiment_embed('房间很干净', 'e5');
 *   SELECT length(sentiment_embed('ok', 'e5')) / 4;         -- the dimension
 *   SELECT vec_distance_cosine(sentiment_embed(a, 'e5', 'query: '),
 *                              sentiment_embed(b, 'e5', 'passage: '));  -- sqlite-vec
 *   SELECT id, embedding FROM classify('docs', 'body', 'e5');  -- batched
 *
 * The result is hidden_size float32 values, little-endian, 4 x hidden_size
 * bytes: the BLOB format sqlite-vec's functions and vec0 tables take. How
 * the token states become one vector is the model's pooling setting
 * (model/format/pooling.h): a sentence-transformers directory's modules.json and
 * 1_Pooling/config.json (mean or CLS pooling, then L2 normalisation when
 * it lists a Normalize module), kept when the model is stored and written
 * back by sentiment_export(); a model without one is mean-pooled over its
 * non-padding tokens and not normalised, as sentence-transformers does for
 * a plain Hugging Face model. No classification head is needed: any
 * encoder, a fine-tuned classifier too, embeds.
 *
 * prompt is text put before text ahead of tokenizing, as
 * sentence-transformers' encode(prompt=...): E5 models expect 'query: '
 * before a question and 'passage: ' before a document, and a model's card
 * says what it wants. The prompt counts towards max_length; NULL means
 * none. It is an argument, not a setting of the model, because the same
 * model embeds both kinds of text; a query source gives classify's batched
 * form the same: classify('SELECT id, ''passage: '' || body FROM docs', 'e5').
 *
 * Inputs as for sentiment(): NULL or blank text (tokenizer_text_blank:
 * empty, white space, control and format characters only) gives NULL,
 * whatever the prompt; numbers embed as their text; a BLOB is taken as
 * UTF-8 bytes; invalid UTF-8 is repaired; text longer than max_length is
 * truncated and counted in sentiment_debug(). A NULL model name, a model
 * name or prompt that is not TEXT or holds a NUL byte is an error naming
 * the argument.
 */
#include <stdint.h>
#include <string.h>

#include "ext/args.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/embed.h"
#include "ext/errors.h"
#include "ext/functions.h"
#include "ext/register.h"
#include "ext/results.h"

static const char k_fn[] = "sentiment_embed()";

/* Longest prompt accepted (bytes); real prompts are a few words. */
#define EMBED_PROMPT_MAX 4096

void sx_embedding_blob(sqlite3_context *ctx, const float *v, int C)
{
    unsigned char *b = sqlite3_malloc64((sqlite3_uint64)C * 4);
    if (!b) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    for (int c = 0; c < C; c++) {
        uint32_t u;
        memcpy(&u, &v[c], sizeof u);
        b[4 * c] = (unsigned char)u;
        b[4 * c + 1] = (unsigned char)(u >> 8);
        b[4 * c + 2] = (unsigned char)(u >> 16);
        b[4 * c + 3] = (unsigned char)(u >> 24);
    }
    sqlite3_result_blob64(ctx, b, (sqlite3_uint64)C * 4, sqlite3_free);
}

/* The prompt argument: NULL (none) or TEXT without NUL bytes, at most
 * EMBED_PROMPT_MAX bytes. */
static int prompt_arg(sqlite3_value *v, const char **prompt, size_t *len, char **errmsg)
{
    static const char *const type_names[] = {"?", "an integer", "a real", "text", "a blob", "NULL"};
    int type = sqlite3_value_type(v);
    *prompt = NULL;
    *len = 0;
    if (type == SQLITE_NULL) return SQLITE_OK;
    if (type != SQLITE_TEXT)
        return sx_fail(errmsg, SQLITE_ERROR, k_fn,
                       "prompt must be TEXT such as 'query: ' (or NULL), got %s", type_names[type]);
    *prompt = (const char *)sqlite3_value_text(v);
    if (!*prompt) return SQLITE_NOMEM;
    *len = (size_t)sqlite3_value_bytes(v);
    if (sx_arg_has_nul(v)) return sx_fail(errmsg, SQLITE_ERROR, k_fn, "prompt contains a NUL byte");
    if (*len > EMBED_PROMPT_MAX)
        return sx_fail(errmsg, SQLITE_ERROR, k_fn, "prompt is %lld bytes; at most %d are accepted",
                       (long long)*len, EMBED_PROMPT_MAX);
    return SQLITE_OK;
}

static void fn_embed(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    char *errmsg = NULL, *joined = NULL;
    float *emb = NULL;
    rt_model *m = NULL;
    const char *text, *prompt = NULL;
    size_t len = 0, plen = 0;
    int cached = 0;

    if (sx_value_text(argv[0], &text, &len) != SQLITE_OK) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (!text) return; /* NULL result */
    if (argc > 2 && prompt_arg(argv[2], &prompt, &plen, &errmsg) != SQLITE_OK) {
        if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
        else sqlite3_result_error_nomem(ctx);
        sqlite3_free(errmsg);
        return;
    }
    m = sx_model_arg(ctx, c, k_fn, argc, argv, 1, &cached);
    if (!m) return;
    if (plen) {
        joined = sqlite3_malloc64((sqlite3_uint64)plen + len + 1);
        if (!joined) {
            sqlite3_result_error_nomem(ctx);
            goto end;
        }
        memcpy(joined, prompt, plen);
        memcpy(joined + plen, text, len);
        joined[plen + len] = 0;
        text = joined;
        len += plen;
    }
    int C = m->bert->cfg.hidden_size;
    emb = sqlite3_malloc64((sqlite3_uint64)C * sizeof *emb);
    if (!emb) {
        sqlite3_result_error_nomem(ctx);
        goto end;
    }
    if (sx_engine_embed(c, k_fn, m, &text, &len, 1, 1, emb, NULL, &errmsg) != SQLITE_OK) {
        if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
        else sqlite3_result_error_nomem(ctx);
        goto end;
    }
    sx_embedding_blob(ctx, emb, C);
end:
    sqlite3_free(errmsg);
    sqlite3_free(emb);
    sqlite3_free(joined);
    sx_model_arg_done(ctx, m, argc, 1, cached);
}

int sx_register_embed(sqlite3 *db, sx_conn *c)
{
    int rc = SQLITE_OK;
    for (int n = 1; n <= 3 && rc == SQLITE_OK; n++) {
        sx_conn_ref(c);
        rc = sqlite3_create_function_v2(db, "sentiment_embed", n, SQLITE_UTF8 | SQLITE_INNOCUOUS, c,
                                        fn_embed, NULL, NULL, sx_conn_unref);
    }
    return rc;
}
