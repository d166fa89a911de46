-- errors.sql: every error names the function, the value and what was
-- expected. Each statement below fails; the shell prints the message.
.headers off
.mode list
-- the CPU, and a registered 'default' that hides a built-in model: the same
-- output in any build, on any machine
SELECT sentiment_config('device', 'cpu');
SELECT sentiment_load('default', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
SELECT sentiment_load('tiny', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
CREATE TABLE reviews(id INTEGER PRIMARY KEY, comment TEXT);
SELECT sentiment('x', 'hotle');
SELECT sentiment('x', 'tin');
SELECT sentiment_score('x', NULL);
SELECT sentiment();
SELECT sentiment('a', 'b', 'c');
SELECT sentiment_config('batchsize');
SELECT sentiment_config('batch_size', 0);
SELECT sentiment_config('device', 'gpu');
SELECT sentiment_config('progress', 'yes');
SELECT sentiment_load('x', '/nonexistent/model');
SELECT sentiment_load('a@1', 'tests/fixtures/models/bert_tiny');
SELECT sentiment_save('default', 'tiny');
SELECT * FROM classify('reviewz', 'comment', 'tiny');
SELECT * FROM classify('reviews', 'commnt', 'tiny');
SELECT * FROM classify('reviews');
SELECT * FROM classify('SELECT id FROM reviews', 'tiny');
SELECT * FROM classify('reviews', 'comment', 'tiny', 0);
SELECT sentiment_batch(comment, 'tiny') FROM (SELECT 1 AS id, 'a' AS comment);
SELECT count(*) FROM (SELECT sentiment_batch(comment, 'tiny') OVER (ORDER BY id) FROM (SELECT 1 AS id, 'a' AS comment UNION ALL SELECT 2, 'b'));
SELECT sentiment_config('precision', 'fp16');
SELECT sentiment_config('precision', 'tf32');
SELECT 'still working', sentiment('好', 'tiny') IS NOT NULL;
