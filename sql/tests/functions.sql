-- functions.sql: the scalar functions on the tiny test model. Outputs are
-- comparisons and properties, not labels (the model has random weights).
.headers off
.mode list
-- the CPU, and a registered 'default' that hides a built-in model: the same
-- output in any build, on any machine
SELECT sentiment_config('device', 'cpu');
SELECT sentiment_load('default', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
SELECT sentiment_load('tiny', 'tests/fixtures/models/bert_tiny') LIKE 'tiny: bert, 2 labels (negative, positive), 2 layers, hidden 64, % parameters, from %';
SELECT sentiment('这家酒店很干净', 'tiny') IN ('negative', 'positive');
SELECT sentiment_score('这家酒店很干净', 'tiny') BETWEEN 0 AND 1;
SELECT abs(sentiment_score('这家酒店很干净', 'tiny') - json_extract(sentiment_probs('这家酒店很干净', 'tiny'), '$.positive')) < 1e-6;
SELECT json_extract(sentiment_probs('这家酒店很干净', 'tiny'), '$.negative') + json_extract(sentiment_probs('这家酒店很干净', 'tiny'), '$.positive') BETWEEN 0.9999 AND 1.0001;
SELECT sentiment_tokens('酒店很好', 'tiny');
-- NULL, empty and white space give NULL
SELECT quote(sentiment(NULL, 'tiny')), quote(sentiment('', 'tiny')), quote(sentiment('  ', 'tiny')), quote(sentiment_score(char(12288), 'tiny')), quote(sentiment_probs(x'', 'tiny'));
-- numbers are classified as their text, blobs as UTF-8 bytes
SELECT sentiment_probs(42, 'tiny') = sentiment_probs('42', 'tiny'), sentiment_probs(x'e5be88e5a5bd', 'tiny') = sentiment_probs('很好', 'tiny');
-- invalid UTF-8 is repaired, never an error
SELECT sentiment(x'fffe41e5be', 'tiny') IN ('negative', 'positive');
-- long text is truncated and counted
SELECT sentiment(replace(hex(zeroblob(20000)), '00', '好的'), 'tiny') IS NOT NULL, json_extract(sentiment_debug(), '$.connection.truncated');
SELECT sentiment_config('batch_size'), sentiment_config('batch_size', 16), sentiment_config('max_length'), sentiment_config('progress', 'off');
SELECT sentiment_device() LIKE 'cpu: %';
SELECT sentiment_version() = json_extract(sentiment_debug(), '$.version') AND sentiment_version() GLOB '[0-9]*.[0-9]*.[0-9]*';
SELECT name, version, source, labels, model_type, layers, hidden_size, heads, max_length, loaded FROM sentiment_models;
