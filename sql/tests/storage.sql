-- storage.sql: models stored in the database, versions and name@N.
.headers off
.mode list
-- the CPU, and a registered 'default' that hides a built-in model: the same
-- output in any build, on any machine
SELECT sentiment_config('device', 'cpu');
SELECT sentiment_load('default', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
SELECT sentiment_load('tiny', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_model_store';
SELECT sentiment_save('hotel', 'tiny');
SELECT sentiment_save('hotel', 'tiny');
SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_model_store';
SELECT name, version, source, labels, created IS NOT NULL FROM sentiment_models;
SELECT sentiment_probs('服务很好', 'hotel') = sentiment_probs('服务很好', 'tiny');
SELECT sentiment_probs('服务很好', 'hotel@1') = sentiment_probs('服务很好', 'tiny');
SELECT sentiment('服务很好', 'hotel@3');
INSERT INTO sentiment_model_store(name, version, config, vocab, labels, safetensors) SELECT 'broken', 1, config, vocab, labels, x'00' FROM sentiment_model_store WHERE version = 1;
SELECT sentiment('服务很好', 'broken');
SELECT name, version, loaded FROM sentiment_models WHERE source = 'database';
