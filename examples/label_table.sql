-- label_table.sql: label a whole table offline from the sqlite3 shell.
--
--   sqlite3 build/reviews.db < examples/reviews.sql
--   sqlite3 build/reviews.db -cmd '.load ./build/sentiment' < examples/label_table.sql
--
-- classify() reads the table in batches (sentiment_config('batch_size')),
-- runs the encoder once per batch and returns one row per source row, in
-- order, with the source rowid as id. The result is an ordinary table.
-- It uses the 'default' model; with a build that has no built-in model,
-- register one first, e.g.
--   -cmd "SELECT sentiment_load('default', 'path/to/hf_model_dir')"
.headers on
.mode box

DROP TABLE IF EXISTS review_labels;
CREATE TABLE review_labels AS
  SELECT id, label, round(score, 3) AS score, truncated
  FROM classify('reviews', 'comment');

-- How many of each label, per category.
SELECT r.category, l.label, count(*) AS n
FROM review_labels AS l JOIN reviews AS r USING (id)
GROUP BY 1, 2 ORDER BY 1, 2;

-- Agreement with the labels the reviews were written with.
SELECT count(*) AS rows,
       round(avg(l.label = r.label), 3) AS agreement
FROM review_labels AS l JOIN reviews AS r USING (id);

-- A few of the most confident positives.
SELECT l.id, l.score, r.comment
FROM review_labels AS l JOIN reviews AS r USING (id)
WHERE l.label = 'positive'
ORDER BY l.score DESC LIMIT 3;
