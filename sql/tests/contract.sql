-- contract.sql: blank text and JSON results through the sqlite3 shell, each
-- line labelled (the case name, then what it gives). On the tiny test model
-- as 'default' and the CPU: the same output in any build, on any machine.
.headers off
.mode list
SELECT sentiment_config('device', 'cpu');
SELECT sentiment_config('threads', 1);
SELECT sentiment_load('default', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
CREATE TABLE t(id INTEGER PRIMARY KEY, body);
INSERT INTO t VALUES (1, '服务很好'), (2, CAST(x'00' AS TEXT)), (3, char(1, 2, 3)),
  (4, char(0x200b, 0xfeff)), (5, x'ff'), (6, '太差了'), (7, char(0x301)), (8, NULL), (9, '');
-- blank text: NULL from every scalar function
SELECT 'blank sql nul', quote(sentiment(CAST(x'00' AS TEXT))), quote(sentiment_score(CAST(x'00' AS TEXT))), quote(sentiment_probs(CAST(x'00' AS TEXT))), quote(sentiment_tokens(CAST(x'00' AS TEXT)));
SELECT 'blank sql controls', quote(sentiment(char(1, 2, 3))), quote(sentiment_score(char(1, 2, 3))), quote(sentiment_probs(char(1, 2, 3))), quote(sentiment_tokens(char(1, 2, 3)));
SELECT 'blank sql zero width', quote(sentiment(char(0x200b, 0x200d, 0xfeff))), quote(sentiment_tokens(char(0x200b, 0x200d, 0xfeff)));
SELECT 'blank sql invalid utf8 blob', quote(sentiment(x'ff')), quote(sentiment_tokens(x'c0af'));
SELECT 'blank sql escape and delete', quote(sentiment(char(27, 127)));
-- classify, the window form, evaluate and train over the same table
SELECT 'blank sql classify', group_concat(id) FROM classify('t', 'body') WHERE label IS NULL AND score IS NULL AND probs IS NULL;
SELECT 'blank sql classify rows', count(*) FROM classify('t', 'body');
SELECT 'blank sql window', group_concat(id) FROM (SELECT id, sentiment_batch(body) OVER (ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING) AS l FROM t) WHERE l IS NULL;
SELECT 'blank sql evaluate', json_extract(r, '$.rows'), json_extract(r, '$.skipped') FROM (SELECT sentiment_evaluate(body, 'positive') AS r FROM t);
-- not blank: a character that makes a token
SELECT 'not blank', sentiment('a' || char(0)) IS NOT NULL, sentiment_tokens(char(0x200b) || '好');
-- JSON results nest
SELECT 'json sql probs', json_type(json_object('p', sentiment_probs('服务很好')), '$.p');
SELECT 'json sql tokens', json_object('t', sentiment_tokens('服务'));
SELECT 'json sql classify probs', json_type(json_object('p', probs), '$.p') FROM classify('SELECT 1, ''服务很好''');
SELECT 'json sql evaluate', json_type(json_object('e', sentiment_evaluate(body, 'positive')), '$.e') FROM t;
SELECT 'json sql debug', json_type(json_object('d', sentiment_debug()), '$.d');
SELECT 'json sql models labels', json_object('l', labels) FROM sentiment_models WHERE name = 'default';
SELECT 'json sql in json_array', json_array(sentiment_tokens('好'));
