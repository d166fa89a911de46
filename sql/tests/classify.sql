-- classify.sql: classify and sentiment_batch agree with sentiment() row by
-- row, including NULL and empty rows, for several batch sizes.
.headers off
.mode list
-- the CPU, and a registered 'default' that hides a built-in model: the same
-- output in any build, on any machine
SELECT sentiment_config('device', 'cpu');
SELECT sentiment_load('default', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
SELECT sentiment_load('tiny', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
CREATE TABLE reviews(id INTEGER PRIMARY KEY, comment TEXT);
INSERT INTO reviews(comment) VALUES
  ('房间很大，床也舒服，早餐一般。'), (NULL), (''), ('外卖超时四十分钟，菜都凉了。'),
  ('   '), ('手机电池很耐用，拍照清楚。'), ('客服态度差，退款拖了两周。'),
  ('位置方便，出门就是地铁。'), ('包装完好，送货上门，赞！'), ('味道偏咸，下次不会再点了。');
SELECT count(*) FROM classify('reviews', 'comment', 'tiny');
SELECT group_concat(id) FROM classify('reviews', 'comment', 'tiny') WHERE label IS NULL;
SELECT count(*) FROM classify('reviews', 'comment', 'tiny', 1) c JOIN reviews r USING (id) WHERE c.label IS NOT sentiment(r.comment, 'tiny');
SELECT count(*) FROM classify('reviews', 'comment', 'tiny', 3) c JOIN reviews r USING (id) WHERE c.label IS NOT sentiment(r.comment, 'tiny') OR abs(c.score - sentiment_score(r.comment, 'tiny')) > 1e-5;
SELECT count(*) FROM classify('reviews', 'comment', 'tiny', 64) c JOIN reviews r USING (id) WHERE c.probs IS NOT sentiment_probs(r.comment, 'tiny') AND abs(json_extract(c.probs, '$.positive') - json_extract(sentiment_probs(r.comment, 'tiny'), '$.positive')) > 1e-5;
SELECT group_concat(id) FROM classify('SELECT id, comment FROM reviews WHERE id > 6', 'tiny');
CREATE VIRTUAL TABLE labels USING classify(reviews, comment, tiny);
SELECT count(*) FROM labels;
SELECT label IS sentiment((SELECT comment FROM reviews WHERE id = 4), 'tiny') FROM labels WHERE id = 4;
CREATE TABLE review_labels AS SELECT id, label, score FROM classify('reviews', 'comment', 'tiny');
SELECT count(*), count(label) FROM review_labels;
SELECT count(*) FROM (SELECT comment, sentiment_batch(comment, 'tiny') OVER (ROWS BETWEEN CURRENT ROW AND 3 FOLLOWING) AS w FROM reviews) WHERE w IS NOT sentiment(comment, 'tiny');
