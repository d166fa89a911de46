/* register.h: each SQL object's registration hook, implemented in the
 * object's own file and called once per connection by sentiment.c's entry
 * point (in the order of its table). Each registers its functions or
 * module on db holding a reference to c (sx_conn_unref drops it) and
 * returns SQLite's code. Room: ext/.
 */
#ifndef EXT_REGISTER_H
#define EXT_REGISTER_H

#include "ext/conn.h"
#include "ext/sqlite_api.h"

/* sentiment(), sentiment_score(), sentiment_label() ... (functions.c) */
int sx_register_functions(sqlite3 *db, sx_conn *c);
/* sentiment_embed() (embed.c) */
int sx_register_embed(sqlite3 *db, sx_conn *c);
/* sentiment_config() (config.c) */
int sx_register_config(sqlite3 *db, sx_conn *c);
/* the classify table-valued function (classify_vtab.c) */
int sx_register_classify(sqlite3 *db, sx_conn *c);
/* sentiment_batch(), the window function (batch_window.c) */
int sx_register_batch_window(sqlite3 *db, sx_conn *c);
/* the sentiment_models table (models_vtab.c) */
int sx_register_models_vtab(sqlite3 *db, sx_conn *c);
/* sentiment_drop(), sentiment_export(), sentiment_use() (store_functions.c) */
int sx_register_store_functions(sqlite3 *db, sx_conn *c);
/* sentiment_explain() (explain.c) */
int sx_register_explain(sqlite3 *db, sx_conn *c);
/* the sentiment_clauses table-valued function (clauses_vtab.c) */
int sx_register_clauses(sqlite3 *db, sx_conn *c);
/* train() (train.c), then the two below */
int sx_register_training(sqlite3 *db, sx_conn *c);
/* sentiment_evaluate() (evaluate.c; called by sx_register_training) */
int sx_register_evaluate(sqlite3 *db, sx_conn *c);
/* the sentiment_training table (train_status.c; called by sx_register_training) */
int sx_register_train_status(sqlite3 *db, sx_conn *c);

#endif
