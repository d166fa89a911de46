-- train.sql: fine-tuning from SQL: train(), the stored versions, the
-- training log, sentiment_use() and sentiment_evaluate(). Only figures that
-- do not depend on the machine's floating point are printed.
.headers off
.mode list
SELECT sentiment_load('tiny', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
SELECT sentiment_config('threads', 1);
SELECT sentiment_config('progress', 'off');
-- 240 generated reviews: neutral words around two positive or two negative ones
CREATE TABLE words(kind, list);
INSERT INTO words VALUES
  ('pos', '["好","棒","赞","喜欢","满意","推荐","干净","舒服","划算","热情"]'),
  ('neg', '["差","烂","糟","失望","脏","吵","贵","慢","坏","后悔"]'),
  ('fill', '["这家","酒店","房间","服务","东西","外卖","我们","今天","感觉","真的","还是","有点"]');
CREATE TABLE labeled(id INTEGER PRIMARY KEY, comment TEXT, label TEXT);
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 299)
INSERT INTO labeled(comment, label)
SELECT json_extract(f.list, '$[' || (i * 7 % 12) || ']') ||
       json_extract(w.list, '$[' || (i * 3 % 10) || ']') ||
       json_extract(f.list, '$[' || (i * 5 % 12) || ']') ||
       json_extract(w.list, '$[' || (i * 11 % 10) || ']'),
       CASE WHEN i % 2 THEN 'negative' ELSE 'positive' END
FROM n, words AS f, words AS w
WHERE f.kind = 'fill' AND w.kind = CASE WHEN i % 2 THEN 'neg' ELSE 'pos' END;
INSERT INTO labeled(comment, label) VALUES (NULL, 'positive'), ('还行', NULL);
SELECT count(*), count(comment), count(label) FROM labeled;
-- train on the first 240, keep 60 to test
SELECT json_extract(r, '$.model'), json_extract(r, '$.version'), json_extract(r, '$.base'),
       json_extract(r, '$.head'), json_extract(r, '$.rows'), json_extract(r, '$.skipped'),
       json_extract(r, '$.train_rows'), json_extract(r, '$.valid_rows'),
       json_extract(r, '$.labels'), json_extract(r, '$.epochs'), json_extract(r, '$.steps'),
       json_array_length(r, '$.train_loss'), json_extract(r, '$.best_accuracy') >= 0.95
FROM (SELECT train('hotel', comment, label, '{"base":"tiny","epochs":4,"lr":3e-3,"seed":7}') AS r
      FROM labeled WHERE id <= 240 OR id > 300);
SELECT name, version, source, labels, json_extract(metrics, '$.rows') FROM sentiment_models WHERE name = 'hotel';
SELECT kind, count(*) FROM sentiment_train_log WHERE model = 'hotel' GROUP BY kind ORDER BY kind;
-- the new model at once
SELECT sentiment('房间干净，服务热情，推荐', 'hotel'), sentiment('又脏又吵，很失望', 'hotel');
SELECT json_extract(e, '$.rows'), json_extract(e, '$.accuracy') >= 0.95,
       json_extract(e, '$.confusion.labels')
FROM (SELECT sentiment_evaluate(comment, label, 'hotel') AS e FROM labeled WHERE id > 240);
-- a second version, then the first made current again
SELECT json_extract(train('hotel', comment, label, '{"base":"tiny","epochs":1,"seed":1}'), '$.version')
FROM labeled;
SELECT sentiment_use('hotel', 1);
SELECT group_concat(version) FROM sentiment_models WHERE name = 'hotel';
SELECT sentiment_probs('服务很好', 'hotel') = sentiment_probs('服务很好', 'hotel@1');
SELECT json_extract(metrics, '$.restored_from') FROM sentiment_models WHERE name = 'hotel' AND version = 3;
-- errors: nothing is written
SELECT train('hotel', comment, 'positive', '{"base":"tiny"}') FROM labeled;
SELECT train('hotel', comment, label, '{"base":"tiny","epoch":3}') FROM labeled;
SELECT train('hotel', comment, label, '{"base":"tiny"}') FROM (SELECT * FROM labeled LIMIT 5);
CREATE TABLE kept(r);
INSERT INTO kept SELECT train('hotel', comment, label, '{"base":"tiny"}') FROM labeled;
SELECT count(*) FROM sentiment_model_store;
