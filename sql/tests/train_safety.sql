-- train_safety.sql: bad options of train() and sentiment_evaluate() about
-- label maps, the head's learning rate and max_length; each case is
-- labelled by the line before it. Nothing here trains a model: each error
-- comes before training.
.headers off
.mode list
SELECT sentiment_load('tiny', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
SELECT sentiment_config('threads', 1);
SELECT sentiment_config('progress', 'off');
CREATE TABLE d(id INTEGER PRIMARY KEY, t TEXT, y);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20)
INSERT INTO d(t, y) SELECT CASE WHEN i % 2 THEN '很好很满意' ELSE '很差很失望' END || i, i % 2 FROM n;
SELECT 'case head_lr_zero';
SELECT train('m', t, y, '{"base":"tiny","head_lr":0}') FROM d;
SELECT 'case head_lr_negative';
SELECT train('m', t, y, '{"base":"tiny","head_lr":-0.001}') FROM d;
SELECT 'case head_lr_one';
SELECT train('m', t, y, '{"base":"tiny","head_lr":1}') FROM d;
SELECT 'case head_lr_text';
SELECT train('m', t, y, '{"base":"tiny","head_lr":"high"}') FROM d;
SELECT 'case head_lr_null';
SELECT train('m', t, y, '{"base":"tiny","head_lr":null}') FROM d;
SELECT 'case labels_not_object';
SELECT train('m', t, y, '{"base":"tiny","labels":"0=negative"}') FROM d;
SELECT 'case labels_array';
SELECT train('m', t, y, '{"base":"tiny","labels":["negative","positive"]}') FROM d;
SELECT 'case labels_value_number';
SELECT train('m', t, y, '{"base":"tiny","labels":{"0":1,"1":"positive"}}') FROM d;
SELECT 'case labels_value_empty';
SELECT train('m', t, y, '{"base":"tiny","labels":{"0":"","1":"positive"}}') FROM d;
SELECT 'case labels_key_empty';
SELECT train('m', t, y, '{"base":"tiny","labels":{"":"negative","1":"positive"}}') FROM d;
SELECT 'case labels_value_too_long';
SELECT train('m', t, y, '{"base":"tiny","labels":{"0":"' || printf('%.200c', 'x') || '","1":"positive"}}') FROM d;
SELECT 'case labels_two_to_one';
SELECT train('m', t, y, '{"base":"tiny","labels":{"0":"negative","1":"negative"}}') FROM d;
SELECT 'case labels_missing_data_label';
SELECT train('m', t, y, '{"base":"tiny","labels":{"0":"negative"}}') FROM d;
SELECT 'case labels_value_with_nul';
SELECT train('m', t, y, '{"base":"tiny","labels":{"0":"neg\u0000x","1":"positive"}}') FROM d;
SELECT 'case max_length_above_positions';
SELECT train('m', t, y, '{"base":"tiny","max_length":65}') FROM d;
SELECT 'case max_length_far_above_positions';
SELECT train('m', t, y, '{"base":"tiny","max_length":4096}') FROM d;
SELECT 'case max_length_below_8';
SELECT train('m', t, y, '{"base":"tiny","max_length":7}') FROM d;
SELECT 'case max_length_above_4096_scratch';
SELECT train('m', t, y, '{"base":"none","max_length":4097}') FROM d;
SELECT 'case evaluate_labels_not_json';
SELECT sentiment_evaluate(t, y, 'tiny', 'zero is negative') FROM d;
SELECT 'case evaluate_labels_array';
SELECT sentiment_evaluate(t, y, 'tiny', '[0,1]') FROM d;
SELECT 'case evaluate_labels_blob';
SELECT sentiment_evaluate(t, y, 'tiny', x'7b7d') FROM d;
SELECT 'case evaluate_labels_unknown_target';
SELECT sentiment_evaluate(t, y, 'tiny', '{"0":"neutral"}') FROM d;
SELECT 'case evaluate_labels_number_target';
SELECT sentiment_evaluate(t, y, 'tiny', '{"0":0}') FROM d;
SELECT 'case evaluate_no_known_label';
SELECT sentiment_evaluate(t, 'y' || y, 'tiny') FROM d;
SELECT 'case evaluate_no_known_label_after_map';
SELECT sentiment_evaluate(t, y + 5, 'tiny', '{"0":"negative"}') FROM d;
SELECT 'case evaluate_some_unknown_warns';
SELECT json_extract(sentiment_evaluate(t, CASE WHEN id = 1 THEN 'maybe' ELSE y END, 'tiny'), '$.warning') FROM d;
SELECT 'case config_max_length_capped_per_model';
SELECT sentiment_config('max_length', 1000);
SELECT name, max_length FROM sentiment_models WHERE name IN ('tiny', 'default') ORDER BY name;
SELECT sentiment_config('max_length', 32);
SELECT name, max_length FROM sentiment_models WHERE name IN ('tiny', 'default') ORDER BY name;
SELECT sentiment_config('max_length', 0);
SELECT 'no model was stored', count(*) FROM sentiment_models WHERE source IN ('database', 'memory');
