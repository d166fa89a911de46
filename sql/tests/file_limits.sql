-- file_limits.sql: files are read only when they are regular files within
-- their size caps, and names or paths holding a NUL byte are errors. Each
-- statement below fails; the comment above it names the case.
.headers off
.mode list
SELECT sentiment_config('device', 'cpu');
SELECT sentiment_config('threads', 1);
SELECT sentiment_load('tiny', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
-- case file_limits/train_vocab_dev_zero
SELECT train('m', 'x', 'a', '{"base":"none","vocab":"/dev/zero"}');
-- case file_limits/train_vocab_dev_null
SELECT train('m', 'x', 'a', '{"base":"none","vocab":"/dev/null"}');
-- case file_limits/train_vocab_directory
SELECT train('m', 'x', 'a', '{"base":"none","vocab":"tests/fixtures"}');
-- case file_limits/train_vocab_missing
SELECT train('m', 'x', 'a', '{"base":"none","vocab":"/no/such/vocab.txt"}');
-- case file_limits/load_dir_is_dev
SELECT sentiment_load('d', '/dev');
-- case file_limits/load_path_is_dev_zero
SELECT sentiment_load('z', '/dev/zero');
-- case nul/train_name
SELECT train(CAST(x'610062' AS TEXT), 'x', 'a', '{"base":"tiny","epochs":1}');
-- case nul/sentiment_model
SELECT sentiment('很好', CAST(x'74696e79007a7a' AS TEXT));
-- case nul/sentiment_load_path
SELECT sentiment_load('p', CAST(CAST('tests/fixtures/models/bert_tiny' AS BLOB) || x'00' AS TEXT));
-- case nul/sentiment_config_value
SELECT sentiment_config('batch_size', CAST(x'3800' AS TEXT));
-- nothing above registered or stored a model
SELECT group_concat(name, ',') FROM sentiment_models;
