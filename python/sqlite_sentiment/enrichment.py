"""The "Sentiment labels" enrichment for datasette-enrichments.

On a table page: actions menu, "Enrich selected data", "Sentiment labels".
The form asks for the text column, the model (the built-in one or one stored
in this database, as sentiment_models lists them) and the names of the
columns to write: label (TEXT), score (REAL) and, when named, the
probabilities (TEXT, JSON). Missing columns are added when the job starts
(initialize). The job then works through the selected rows in batches of
256 (datasette-enrichments fetches them, in primary-key order, with the
table's filters): each batch goes into a temporary table and through
`classify`, which runs the encoder on it in length-sorted batches, and the
results are written back by primary key (or rowid) in one transaction on
Datasette's write connection, which has no time limit. Progress, errors,
pause and cancel are the enrichment job view's. A row whose text is NULL or
blank gets NULL label and score.
"""
from datasette_enrichments import Enrichment
from wtforms import Form, SelectField, StringField
from wtforms.validators import DataRequired, ValidationError

BATCH_TABLE = "sentiment_enrich_batch"
_TEXT_NAMES = ("text", "comment", "review", "content", "body", "message", "title")


def quote(name):
    return '"' + name.replace('"', '""') + '"'


class SentimentEnrichment(Enrichment):
    name = "Sentiment labels"
    slug = "sentiment"
    description = ("Classify a text column with the sentiment extension and write each row's "
                   "label and score to columns of this table (in batches, in the background).")
    batch_size = 256

    async def get_config_form(self, datasette, db, table):
        columns = await db.table_columns(table)
        pks = await db.primary_keys(table) or ["rowid"]
        text_default = next((c for c in columns if c.lower() in _TEXT_NAMES),
                            columns[0] if columns else None)
        models = [r[0] for r in (await db.execute(
            "SELECT DISTINCT name FROM sentiment_models ORDER BY name <> 'default', name")).rows]

        def not_a_key_or_source(form, field):
            if field.data in pks:
                raise ValidationError(f"{field.data!r} is the primary key")
            if field.data == form.source_column.data:
                raise ValidationError("must differ from the text column")

        def distinct(form, field):
            names = [form.label_column.data, form.score_column.data]
            if form.probs_column.data:
                names.append(form.probs_column.data)
            if names.count(field.data) > 1:
                raise ValidationError("each output column needs its own name")

        class ConfigForm(Form):
            source_column = SelectField(
                "Text column", choices=list(columns), default=text_default,
                description="The column whose text is classified")
            model = SelectField(
                "Model", choices=models, default="default",
                description="'default' is the built-in Chinese review-sentiment model; "
                            "others are models stored in this database (train())")
            label_column = StringField(
                "Label column", default="sentiment",
                validators=[DataRequired(), not_a_key_or_source, distinct],
                description="Written with the label (TEXT); added if missing")
            score_column = StringField(
                "Score column", default="sentiment_score",
                validators=[DataRequired(), not_a_key_or_source, distinct],
                description="Written with the score (REAL): P(positive) for a "
                            "negative/positive model, else P(label)")
            probs_column = StringField(
                "Probabilities column", default="",
                validators=[not_a_key_or_source, distinct],
                description="Optional: JSON object label -> probability (TEXT)")

        return ConfigForm

    async def initialize(self, datasette, db, table, config):
        wanted = [(config["label_column"], "TEXT"), (config["score_column"], "REAL")]
        if config.get("probs_column"):
            wanted.append((config["probs_column"], "TEXT"))

        def add_columns(conn):
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({quote(table)})")}
            for name, kind in wanted:
                if name not in have:
                    conn.execute(f"ALTER TABLE {quote(table)} ADD COLUMN {quote(name)} {kind}")

        await db.execute_write_fn(add_columns)

    async def enrich_batch(self, datasette, db, table, rows, pks, config):
        source = config["source_column"]
        model = config.get("model") or "default"
        texts = []
        for row in rows:
            v = row.get(source)
            texts.append(v if isinstance(v, (str, int, float)) else None)
        keys = [[row[pk] for pk in pks] for row in rows]
        targets = [config["label_column"], config["score_column"]]
        if config.get("probs_column"):
            targets.append(config["probs_column"])
        update = (f"UPDATE {quote(table)} SET "
                  + ", ".join(f"{quote(c)} = ?" for c in targets)
                  + " WHERE " + " AND ".join(f"{quote(pk)} = ?" for pk in pks))

        def classify_and_write(conn):
            conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {BATCH_TABLE}(text)")
            with conn:
                conn.execute(f"DELETE FROM temp.{BATCH_TABLE}")
                conn.executemany(f"INSERT INTO temp.{BATCH_TABLE}(text) VALUES (?)",
                                 [(t,) for t in texts])
                results = conn.execute(
                    f"SELECT label, score, probs FROM classify('{BATCH_TABLE}', 'text', ?)",
                    (model,)).fetchall()
                conn.execute(f"DELETE FROM temp.{BATCH_TABLE}")
                if len(results) != len(keys):
                    raise RuntimeError(f"classify gave {len(results)} rows for {len(keys)}")
                params = []
                for (label, score, probs), key in zip(results, keys):
                    values = [label, score]
                    if len(targets) == 3:
                        values.append(probs)
                    params.append(values + key)
                conn.executemany(update, params)
            return len(results)

        return await db.execute_write_fn(classify_and_write)

