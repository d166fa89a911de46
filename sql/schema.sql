-- schema.sql: the table in which a database keeps its trained models.
--
-- The sentiment extension creates this table itself, the first time a model
-- is stored (sentiment_save(), train()); loading the extension alone never
-- writes to a database. This file is the reference copy of the schema
-- (tests check that the extension creates exactly this table).
--
-- One row per model version. Store a new version rather than updating one;
-- an updated row is seen by the next statement that uses it (the
-- process-wide model cache knows a stored model by the SHA-256 of its
-- config, vocab, labels, safetensors and tokenizer, never by anything
-- stored here).
-- `name@N` in SQL picks version N; a bare name the latest.
--   name         model name used in SQL (never 'default', no '@')
--   version      1, 2, ... per name
--   uid          random identity of the row (informational)
--   config       config.json text (BERT / ERNIE / RoBERTa keys, id2label)
--   vocab        vocab.txt text (WordPiece); '' when tokenizer is set
--   labels       JSON array of the labels, in class-id order
--   metrics      JSON report of training / evaluation, or NULL
--   created      UTC time the row was stored (ISO 8601)
--   safetensors  the weights, safetensors format (F32, F16 or BF16)
--   tokenizer    tokenizer.json (WordPiece or Unigram) as a BLOB, or NULL
--                for a model whose tokenizer is vocab; a table made before
--                this column existed gets it the next time a model is stored
CREATE TABLE IF NOT EXISTS sentiment_model_store(
  name TEXT NOT NULL,
  version INTEGER NOT NULL,
  uid TEXT NOT NULL UNIQUE DEFAULT (lower(hex(randomblob(16)))),
  config TEXT NOT NULL,
  vocab TEXT NOT NULL,
  labels TEXT NOT NULL,
  metrics TEXT,
  created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  safetensors BLOB NOT NULL,
  tokenizer BLOB,
  PRIMARY KEY (name, version)
);

-- The training log (train(), see ext/train.c): one row per optimizer step and
-- per epoch of the run that made version `version` of `model`.
CREATE TABLE IF NOT EXISTS sentiment_train_log(
  model TEXT NOT NULL,
  version INTEGER NOT NULL,
  kind TEXT NOT NULL,
  epoch INTEGER NOT NULL,
  step INTEGER NOT NULL,
  loss REAL,
  lr REAL,
  grad_norm REAL,
  valid_accuracy REAL,
  examples_per_sec REAL,
  seconds REAL
);

-- A deleted or renamed version takes its log rows with it. A database made
-- by an earlier release gets these the next time a model is stored, copied
-- (sentiment_use) or dropped (sentiment_drop).
CREATE TRIGGER IF NOT EXISTS sentiment_model_store_delete
AFTER DELETE ON sentiment_model_store
BEGIN
  DELETE FROM sentiment_train_log WHERE model = old.name AND version = old.version;
END;

CREATE TRIGGER IF NOT EXISTS sentiment_model_store_rename
AFTER UPDATE OF name, version ON sentiment_model_store
BEGIN
  UPDATE sentiment_train_log SET model = new.name, version = new.version
  WHERE model = old.name AND version = old.version;
END;
