-- schema.sql: the table in which a database keeps its trained models.
--
-- The sentiment extension creates this table itself, the first time a model
-- is stored (sentiment_save(), train()); loading the extension alone never
-- writes to a database. This file is the reference copy of the schema
-- (tests check that the extension creates exactly this table).
--
-- One row per model version. Rows are immutable: store a new version instead
-- of updating one (a row's uid identifies its weights in the process-wide
-- model cache). `name@N` in SQL picks version N; a bare name the latest.
--   name         model name used in SQL (never 'default', no '@')
--   version      1, 2, ... per name
--   uid          random identity of this row's weights
--   config       config.json text (BERT / ERNIE / RoBERTa keys, id2label)
--   vocab        vocab.txt text (WordPiece)
--   labels       JSON array of the labels, in class-id order
--   metrics      JSON report of training / evaluation, or NULL
--   created      UTC time the row was stored (ISO 8601)
--   safetensors  the weights, safetensors format (F32, F16 or BF16)
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
  PRIMARY KEY (name, version)
);
