-- schema_trust.sql: a database file that plants a persistent classify table
-- (with PRAGMA writable_schema, no extension needed) cannot make the reader
-- run functions with side effects: the shell's writefile() and
-- load_extension(), or ours that change the connection or the database.
.headers off
.mode list
SELECT sentiment_config('device', 'cpu');
SELECT sentiment_load('default', 'tests/fixtures/models/bert_tiny') IS NOT NULL;
.shell rm -f /tmp/sentiment_schema_trust.db /tmp/sentiment_schema_trust.owned
ATTACH '/tmp/sentiment_schema_trust.db' AS p;
CREATE TABLE p.reviews(id INTEGER PRIMARY KEY, comment TEXT);
INSERT INTO p.reviews(comment) VALUES ('房间很干净'), ('等了两个小时');
PRAGMA p.writable_schema = ON;
INSERT INTO p.sqlite_schema(type, name, tbl_name, rootpage, sql) VALUES
  ('table', 'owned', 'owned', 0, 'CREATE VIRTUAL TABLE owned USING classify(''SELECT 1, writefile(''''/tmp/sentiment_schema_trust.owned'''', ''''owned'''')'')'),
  ('table', 'ext', 'ext', 0, 'CREATE VIRTUAL TABLE ext USING classify(''SELECT 1, load_extension(''''/tmp/evil.so'''', ''''init'''')'')'),
  ('table', 'conf', 'conf', 0, 'CREATE VIRTUAL TABLE conf USING classify(''SELECT 1, sentiment_config(''''batch_size'''', 1)'')'),
  ('table', 'files', 'files', 0, 'CREATE VIRTUAL TABLE files USING classify(''SELECT 1, name FROM fsdir(''''/etc'''')'')'),
  ('table', 'plain', 'plain', 0, 'CREATE VIRTUAL TABLE plain USING classify(''SELECT id, comment FROM reviews'')');
PRAGMA p.writable_schema = OFF;
DETACH p;
ATTACH '/tmp/sentiment_schema_trust.db' AS p;
SELECT * FROM p.owned;
SELECT readfile('/tmp/sentiment_schema_trust.owned') IS NULL;
SELECT * FROM p.ext;
SELECT * FROM p.conf;
SELECT sentiment_config('batch_size');
SELECT * FROM p.files;
-- a stored source that only reads runs
SELECT id, label IS NOT NULL FROM p.plain;
-- the same SQL typed by the user is the user's to run
SELECT count(*) FROM classify('SELECT 1, name FROM fsdir(''tests/fixtures/models/bert_tiny'')');
DETACH p;
.shell rm -f /tmp/sentiment_schema_trust.db
