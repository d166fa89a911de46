-- train.sql: fine-tune a model on a labeled table and use it, all in SQL.
--
--   sqlite3 build/reviews.db < examples/reviews.sql
--   sqlite3 build/reviews.db -cmd '.load ./build/sentiment' < examples/train.sql
--
-- It starts from the 'default' model. With a build that has no built-in
-- model, register one first, e.g.
--   -cmd "SELECT sentiment_load('default', 'path/to/hf_model_dir')"
-- or set "base" to "none" below to train a small model from scratch.
-- The model is stored in build/reviews.db (sentiment_model_store) as a new version
-- of 'reviews_ft' each time this runs.
.headers on
.mode box

-- Hold out every fifth review to test on.
-- train() reads the rows, holds out 10% of them for validation, trains and
-- keeps the epoch with the best validation accuracy.
SELECT json_extract(r, '$.version') AS version,
       json_extract(r, '$.rows') AS rows,
       json_extract(r, '$.head') AS head,
       json_extract(r, '$.train_loss') AS train_loss,
       json_extract(r, '$.valid_accuracy') AS valid_accuracy,
       json_extract(r, '$.best_epoch') AS best_epoch,
       round(json_extract(r, '$.seconds'), 1) AS seconds
FROM (SELECT train('reviews_ft', comment, label,
                   '{"base":"default","epochs":3,"lr":5e-5,"batch_size":16,"seed":42}') AS r
      FROM reviews WHERE id % 5 <> 0);

-- The base model and the fine-tuned one on the held-out reviews.
SELECT 'default' AS model,
       round(json_extract(e, '$.accuracy'), 3) AS accuracy,
       round(json_extract(e, '$.macro_f1'), 3) AS macro_f1
FROM (SELECT sentiment_evaluate(comment, label, 'default') AS e FROM reviews WHERE id % 5 = 0)
UNION ALL
SELECT 'reviews_ft',
       round(json_extract(e, '$.accuracy'), 3),
       round(json_extract(e, '$.macro_f1'), 3)
FROM (SELECT sentiment_evaluate(comment, label, 'reviews_ft') AS e FROM reviews WHERE id % 5 = 0);

-- A wide part (hashed character n-grams, mixed with the encoder on the
-- validation rows) fitted in seconds on top of the fine-tuned model:
-- "epochs": 0 keeps its encoder as it is.
SELECT json_extract(r, '$.wide.valid_accuracy_encoder') AS encoder_valid,
       json_extract(r, '$.wide.valid_accuracy_wide') AS wide_valid,
       json_extract(r, '$.wide.valid_accuracy') AS mixed_valid,
       round(json_extract(r, '$.wide.seconds'), 2) AS seconds
FROM (SELECT train('reviews_wide', comment, label,
                   '{"base":"reviews_ft","epochs":0,"wide":true,"seed":42}') AS r
      FROM reviews WHERE id % 5 <> 0);
SELECT 'reviews_wide' AS model,
       round(json_extract(e, '$.accuracy'), 3) AS accuracy,
       round(json_extract(e, '$.macro_f1'), 3) AS macro_f1
FROM (SELECT sentiment_evaluate(comment, label, 'reviews_wide') AS e FROM reviews WHERE id % 5 = 0);

-- The new model works everywhere a model name does.
SELECT id, label AS written, sentiment(comment, 'reviews_ft') AS predicted, comment
FROM reviews WHERE id % 5 = 0 LIMIT 5;

-- Every stored version, with what its training reported.
SELECT name, version, created,
       json_extract(metrics, '$.best_accuracy') AS valid_accuracy
FROM sentiment_models WHERE name = 'reviews_ft';

-- The training curve of the latest version, one row per epoch.
SELECT epoch, round(loss, 4) AS train_loss, round(valid_accuracy, 3) AS valid_accuracy
FROM sentiment_train_log
WHERE model = 'reviews_ft' AND kind = 'epoch'
  AND version = (SELECT max(version) FROM sentiment_train_log WHERE model = 'reviews_ft')
ORDER BY epoch;

-- To go back to an earlier version: SELECT sentiment_use('reviews_ft', 1);
-- It is stored again as the newest version, so 'reviews_ft' means it.
