-- window.sql: sentiment_batch(), batched classification of any expression.
--
--   sqlite3 build/reviews.db < examples/reviews.sql
--   sqlite3 build/reviews.db -cmd '.load ./build/sentiment' < examples/window.sql
--
-- sentiment(x) classifies one row per encoder call. classify() batches, but
-- needs a table or a query as text. The window form batches any
-- expression inside any query: with the frame "the current row and the
-- next 255", each encoder call takes up to 256 rows (split into
-- sentiment_config('batch_size') batches, ordered by length).
.headers on
.mode box

-- The label of an expression, batched: category and comment together.
SELECT id, category,
       sentiment_batch(category || '：' || comment)
         OVER (ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING) AS label
FROM reviews
ORDER BY id
LIMIT 5;

-- Per category: PARTITION BY keeps the batches inside each category.
SELECT category, label, count(*) AS n
FROM (SELECT category,
             sentiment_batch(comment)
               OVER (PARTITION BY category ORDER BY id
                     ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING) AS label
      FROM reviews)
GROUP BY 1, 2 ORDER BY 1, 2;

-- Same labels as sentiment(), row by row.
SELECT count(*) AS rows,
       sum(w IS NOT sentiment(comment)) AS differences
FROM (SELECT comment,
             sentiment_batch(comment)
               OVER (ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING) AS w
      FROM reviews);
