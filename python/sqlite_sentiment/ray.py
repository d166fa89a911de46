"""sqlite_sentiment.ray: batch labelling on a Ray cluster, with the same engine.

Ray Data moves the rows; every worker process opens one in-memory SQLite
connection, loads the extension and the model once, and labels each batch
through the classify virtual table (the batch goes into a temporary table,
classify reads it), so a worker is exactly as fast as classify.

    import ray, sqlite_sentiment.ray as sr
    ray.init()                                         # or ray.init(address="auto")
    ds = ray.data.read_parquet("reviews/")             # or read_csv(...)
    out = sr.label_dataset(ds, column="comment", id_column="id")
    out.write_parquet("labelled/")

    # a model fine-tuned with train() in a database: read once here, shipped
    # to every worker through the object store, never retrained
    out = sr.label_dataset(ds, column="comment", model="hotel", database="train.db")

    # many SQLite files, one shard each, labelled in place into a new table
    report = sr.label_sqlite_files(paths, "reviews", "comment", "review_labels")

label_dataset(ds, column, ...) -> ray.data.Dataset
    Every input column, unchanged, plus label (string), score (float64:
    P(positive) for a negative/positive model, else P(top label)), probs (a
    struct with one float64 field per label of the model, in class order:
    probs.positive in SQL engines, r["probs"]["positive"] in Python) and
    truncated (bool: the text was cut to the model's maximum length), as
    classify gives them, and error. A row whose text cannot be
    classified has NULL label/score/probs/truncated and says why in error:
    "text is NULL", "text is blank", "text is int, not a string", "invalid
    UTF-8 at byte 5" (bytes that are valid UTF-8 are classified as text).
    Exactly when label is NULL, error is not. The job never stops for one row.
    prefix= goes before each added name. When the input already has a
    column of an added name and prefix is not given, the prefix "pred_"
    ("pred2_", ... if that is taken too) is used and said on stderr (on the
    driver when the schema is known beforehand, else in the workers' log);
    a prefix given that still clashes is an error. No row has a name twice.

label_sqlite_files(paths, table, column, out_table, ...) -> list of dict
    One file per task. Each file gets out_table(id, label, score, probs
    (JSON text, as sentiment_probs gives it), truncated, error), id being the source rowid (or id_column). It is
    written as a staging table (sentiment_staging_<out_table>) in chunks and
    renamed to out_table in one transaction, so a worker killed at any point
    leaves either no out_table or a complete one; a file that already has
    out_table is skipped, so a rerun does only what is left. Text stored as
    INTEGER, REAL or invalid UTF-8 gets an error, as above. A file that
    fails (missing, no such table or column) is reported and the others go
    on; the call then raises ShardsFailed, which carries the report.

Models (model=, database=):
    "default"                    the built-in model: nothing is shipped.
    model="hotel", database=db   a model stored in db by train() (or
                                 sentiment_save), "hotel@2" for a version:
                                 exported once on the driver.
    ModelFiles.from_directory(d) a Hugging Face model directory.
    The files go into the object store once; each worker writes them to a
    private temporary directory and registers them with sentiment_load()
    under the model's name (without "@N"), removed when the worker exits (a
    killed worker's copy by the next worker that starts on that machine).

Workers and devices:
    num_workers  actors (default: on every machine, (its CPUs - 1) / threads;
                 or its GPUs / num_gpus when num_gpus is set). Leave CPUs to
                 the tasks that read the input (read_parquet, read_csv,
                 repartition): a pool holding every CPU waits for input that
                 cannot be read. To give the pool every CPU, read first
                 (ds = ds.materialize()); a write after it then runs as the
                 pool finishes.
    threads      CPU threads per worker (sentiment_config('threads')), and the
                 CPUs each actor reserves (default 1).
    num_gpus=1   one worker per GPU: each actor reserves one GPU; Ray points
                 CUDA_VISIBLE_DEVICES at it, so the worker uses device
                 'cuda:0' (its GPU), and the encoder batch (default 256) is
                 shrunk by the engine to what that GPU's free memory holds,
                 as classify does. A fraction shares a GPU: num_gpus=0.125
                 puts eight workers on each. One worker's CPU side (Arrow to
                 SQLite, tokenizing, SQLite to Arrow) caps it at about 18,000
                 rows/s a CPU (bench/RESULTS.md), well below what a large GPU
                 can encode, so a fraction is how a GPU is kept busy.
    device, precision, max_length, encoder_batch_size
                 sentiment_config settings for every worker.
    batch_size   rows per Ray batch (one classify call), default 1024.

Failures: Ray restarts a worker that dies and runs its batch again
(max_retries: restarts per actor and retries per batch, default without
limit, Ray Data's own default). A batch's output is a function of its input
rows, so a retried batch yields the same rows once: no row is lost or doubled
(the tests kill a worker mid-run and count). A model that does not load, or a
device that cannot run, is an error of the job, raised where it happens.

The parts run without Ray too: Engine labels lists of values on one
connection, Labeller is the callable class label_dataset hands to
map_batches (use it in your own pipelines), ShardLabeller labels files.
"""

import json
import os
import shutil
import sqlite3
import tempfile
import time

from . import load as _load_extension

__all__ = [
    "label_dataset", "label_sqlite_files", "label_sqlite_file", "ModelFiles",
    "Engine", "Labeller", "ShardLabeller", "ShardsFailed", "OUTPUT_COLUMNS",
]

# The columns a label adds, in order.
OUTPUT_COLUMNS = ("label", "score", "probs", "truncated", "error")

DEFAULT_BATCH_SIZE = 1024          # rows per Ray batch, one classify call
DEFAULT_GPU_ENCODER_BATCH = 256    # rows per encoder call on a GPU (shrunk to fit)
DEFAULT_SHARD_CHUNK = 4096         # rows per committed chunk of a SQLite shard

# Files of a model directory that are never sent (other frameworks' weights).
_SKIPPED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".ot")


def _quote(name):
    return '"' + name.replace('"', '""') + '"'


# ---------------------------------------------------------------- models

class ModelFiles:
    """A model as files (relative path -> bytes), to ship to workers.

    name is what workers register it as, and what classify is given."""

    def __init__(self, name, files):
        if not name or "@" in name:
            raise ValueError(f"ModelFiles: model name {name!r} must be non-empty, without '@'")
        if "config.json" not in files:
            raise ValueError(f"ModelFiles: model {name!r} has no config.json "
                             f"(files: {', '.join(sorted(files)) or 'none'})")
        self.name = name
        self.files = dict(files)

    @property
    def nbytes(self):
        return sum(len(b) for b in self.files.values())

    def __repr__(self):
        return f"ModelFiles({self.name!r}, {len(self.files)} files, {self.nbytes} bytes)"

    @classmethod
    def from_directory(cls, path, name=None):
        """Every regular file of a Hugging Face model directory (and of its
        first-level subdirectories, such as 1_Pooling/), less other
        frameworks' weight files. name defaults to the directory's name."""
        path = os.path.abspath(path)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"ModelFiles.from_directory: {path!r} is not a directory")
        files = {}
        for entry in sorted(os.listdir(path)):
            full = os.path.join(path, entry)
            subs = [entry]
            if os.path.isdir(full) and not entry.startswith("."):
                subs = [os.path.join(entry, e) for e in sorted(os.listdir(full))]
            for rel in subs:
                p = os.path.join(path, rel)
                if os.path.isfile(p) and not rel.endswith(_SKIPPED_SUFFIXES) \
                        and not os.path.basename(rel).startswith("."):
                    with open(p, "rb") as f:
                        files[rel] = f.read()
        return cls(name or os.path.basename(path.rstrip("/")), files)

    @classmethod
    def from_database(cls, database, model):
        """A model stored in database by train() or sentiment_save()
        ('hotel', or 'hotel@2' for version 2), through sentiment_export();
        registered on workers as 'hotel'."""
        if not os.path.isfile(database):
            raise FileNotFoundError(f"ModelFiles.from_database: no database file {database!r}")
        conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        try:
            _load_extension(conn)
            with tempfile.TemporaryDirectory(prefix="sentiment-export-") as tmp:
                out = os.path.join(tmp, "model")
                conn.execute("SELECT sentiment_export(?, ?)", (model, out)).fetchone()
                files = {}
                for f in sorted(os.listdir(out)):
                    with open(os.path.join(out, f), "rb") as fh:
                        files[f] = fh.read()
        finally:
            conn.close()
        return cls(model.split("@", 1)[0], files)

    def write(self, directory):
        """Writes the files under directory (which must exist)."""
        for rel, data in self.files.items():
            dst = os.path.normpath(os.path.join(directory, rel))
            if not dst.startswith(os.path.join(directory, "")):
                raise ValueError(f"ModelFiles: file name {rel!r} leaves the model directory")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            # A new file, never through a link (directory is the worker's
            # private mkdtemp, but a file name is never trusted to be free).
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                         0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)


def _resolve_model(model, database):
    """(name, ModelFiles or None) for label_dataset/label_sqlite_files."""
    if isinstance(model, ModelFiles):
        if database is not None:
            raise ValueError("model is ModelFiles: database= must not be given")
        return model.name, model
    if not isinstance(model, str) or not model:
        raise TypeError(f"model must be a model name or ModelFiles, not {type(model).__name__}")
    if database is not None:
        files = ModelFiles.from_database(database, model)
        return files.name, files
    return model, None


# ---------------------------------------------------------------- one engine

class _NotText:
    """A stored INTEGER or REAL where text was expected (SQLite shards)."""

    def __init__(self, kind):
        self.kind = kind


def _text_or_error(value):
    """(text, None) when value can be classified as text, else (None, why)."""
    if value is None:
        return None, "text is NULL"
    if isinstance(value, _NotText):
        return None, f"text is {value.kind}, not a string"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            return None, f"invalid UTF-8: unpaired surrogate at character {e.start}"
        return value, None
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8"), None
        except UnicodeDecodeError as e:
            return None, f"invalid UTF-8 at byte {e.start}"
    # A float NaN is how pandas spells a missing value.
    if isinstance(value, float) and value != value:
        return None, "text is NULL"
    return None, f"text is {type(value).__name__}, not a string"


_MODEL_DIR_PREFIX = "sentiment-model-"


def _remove_dead_model_dirs():
    """Removes the model copies of worker processes that were killed before
    they could (directories named after a pid that no longer runs)."""
    tmp = tempfile.gettempdir()
    for entry in os.listdir(tmp):
        if not entry.startswith(_MODEL_DIR_PREFIX):
            continue
        pid = entry[len(_MODEL_DIR_PREFIX):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(tmp, entry), ignore_errors=True)
        except OSError:
            pass            # alive, another user's


class Engine:
    """One SQLite connection with the extension and a model: labels lists of
    values through classify. One per worker process; not thread-safe."""

    def __init__(self, model="default", model_files=None, *, device=None, threads=1,
                 encoder_batch_size=None, max_length=None, precision=None):
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._model_dir = None
        try:
            _load_extension(self.conn)
            settings = [("device", device), ("threads", threads), ("precision", precision),
                        ("batch_size", encoder_batch_size), ("max_length", max_length)]
            for key, value in settings:
                if value is not None:
                    self.conn.execute("SELECT sentiment_config(?, ?)", (key, value)).fetchone()
            if model_files is not None:
                if model_files.name != model:
                    raise ValueError(f"Engine: model {model!r} but files for {model_files.name!r}")
                _remove_dead_model_dirs()
                self._model_dir = tempfile.mkdtemp(prefix=f"{_MODEL_DIR_PREFIX}{os.getpid()}-")
                model_files.write(self._model_dir)
                try:
                    self.conn.execute("SELECT sentiment_load(?, ?)",
                                      (model, self._model_dir)).fetchone()
                except sqlite3.Error as e:
                    raise type(e)(f"model {model!r} shipped to this worker does not load: {e}"
                                  ) from None
            self.model = model
            # Load it now: a bad model or device fails here, once per worker.
            probs = self.conn.execute("SELECT sentiment_probs('x', ?)", (model,)).fetchone()[0]
            self.labels = list(json.loads(probs))      # the model's, in class order
            self.conn.execute("CREATE TEMP TABLE sx_batch(pos INTEGER PRIMARY KEY, text TEXT)")
        except BaseException:
            self.close()
            raise

    def device(self):
        return self.conn.execute("SELECT sentiment_device()").fetchone()[0]

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self._model_dir:
            shutil.rmtree(self._model_dir, ignore_errors=True)
            self._model_dir = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def label(self, values):
        """Lists (label, score, probs, truncated, error), one entry per value,
        in order; texts are classified in one classify call."""
        n = len(values)
        out_label = [None] * n
        out_score = [None] * n
        out_probs = [None] * n
        out_trunc = [None] * n
        out_error = [None] * n
        rows = []
        for i, v in enumerate(values):
            text, why = _text_or_error(v)
            if why is None:
                rows.append((i, text))
            else:
                out_error[i] = why
        c = self.conn
        # One transaction, rolled back on any error, so the temporary table
        # is empty again whatever happens and a retried batch starts clean.
        c.execute("BEGIN")
        try:
            c.executemany("INSERT INTO temp.sx_batch(pos, text) VALUES (?, ?)", rows)
            cur = c.execute("SELECT id, label, score, probs, truncated FROM "
                            "classify('SELECT pos, text FROM temp.sx_batch', ?)", (self.model,))
            for pos, label, score, probs, truncated in cur:
                if label is None:
                    out_error[pos] = "text is blank"
                else:
                    out_label[pos], out_score[pos], out_probs[pos] = label, score, probs
                    out_trunc[pos] = bool(truncated)
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("ROLLBACK")
        return out_label, out_score, out_probs, out_trunc, out_error


# ---------------------------------------------------------------- Ray Data

def _output_names(prefix):
    return [prefix + c for c in OUTPUT_COLUMNS]


def _choose_prefix(names, prefix):
    """prefix, or when it is None a prefix under which no added name is in
    names: "" when none clashes, else "pred_", "pred2_", ... (said on
    stderr)."""
    if prefix is not None:
        return prefix
    taken = set(names)
    k = 0
    while True:
        p = "" if k == 0 else "pred_" if k == 1 else f"pred{k}_"
        if not taken.intersection(_output_names(p)):
            break
        k += 1
    if p:
        import sys
        clash = [n for n in OUTPUT_COLUMNS if n in taken]
        print(f"label_dataset: the input already has column(s) {clash}; the added columns "
              f"are named {_output_names(p)} (prefix= to choose)", file=sys.stderr)
    return p


def _check_columns(names, column, id_column, out_names):
    if column not in names:
        raise KeyError(f"label_dataset: no text column {column!r}; columns: {names}")
    if id_column is not None and id_column not in names:
        raise KeyError(f"label_dataset: no id column {id_column!r}; columns: {names} "
                       "(pass id_column=None to label without one)")
    clash = [n for n in out_names if n in names]
    if clash:
        raise ValueError(f"label_dataset: the input already has column(s) {clash}; "
                         "pass prefix='pred_' (or another) for the output columns")


class Labeller:
    """The callable class label_dataset gives map_batches: loads the
    extension and the model once per actor, labels pyarrow batches.

        ds.map_batches(Labeller, batch_format="pyarrow",
                       fn_constructor_kwargs={"column": "comment"},
                       compute=ray.data.ActorPoolStrategy(size=4))

    model_files may be ModelFiles or an ObjectRef to one (the object store's
    copy, fetched once per actor)."""

    def __init__(self, column, id_column="id", model="default", model_files=None, *,
                 prefix=None, device=None, threads=1, encoder_batch_size=None,
                 max_length=None, precision=None, use_gpu=False):
        if model_files is not None and not isinstance(model_files, ModelFiles):
            import ray
            model_files = ray.get(model_files)
        if use_gpu and device is None:
            # Ray's CUDA_VISIBLE_DEVICES holds just this actor's GPU.
            device = "cuda:0"
            if encoder_batch_size is None:
                encoder_batch_size = DEFAULT_GPU_ENCODER_BATCH
        self.column = column
        self.id_column = id_column
        self.prefix = prefix
        self.names = None if prefix is None else _output_names(prefix)
        self.engine = Engine(model, model_files, device=device, threads=threads,
                             encoder_batch_size=encoder_batch_size, max_length=max_length,
                             precision=precision)
        import pyarrow as pa
        self.probs_type = pa.struct([pa.field(l, pa.float64()) for l in self.engine.labels])

    def __call__(self, batch):
        import json
        import pyarrow as pa

        if not isinstance(batch, pa.Table):
            batch = pa.Table.from_pandas(batch, preserve_index=False) \
                if hasattr(batch, "columns") else pa.table(batch)
        if self.names is None:       # decided on the first batch's columns
            self.names = _output_names(_choose_prefix(batch.column_names, None))
        _check_columns(batch.column_names, self.column, self.id_column, self.names)
        label, score, probs, trunc, error = self.engine.label(batch.column(self.column).to_pylist())
        probs = [None if p is None else json.loads(p) for p in probs]
        types = (pa.string(), pa.float64(), self.probs_type, pa.bool_(), pa.string())
        for name, values, typ in zip(self.names, (label, score, probs, trunc, error), types):
            batch = batch.append_column(name, pa.array(values, type=typ))
        return batch


def _per_node(resource, each, keep=0):
    """Actors of `each` units of resource that fit on the cluster's live
    nodes when `keep` units stay free on every node."""
    import ray
    total = 0
    for node in ray.nodes():
        if node.get("Alive"):
            have = node.get("Resources", {}).get(resource, 0)
            total += max(0, int((have - keep) // each))
    return total


def _pool_args(num_workers, threads, num_gpus, max_retries):
    """(num_workers, map_batches keyword arguments) for an actor pool."""
    import ray.data
    if num_gpus:
        workers = num_workers or _per_node("GPU", num_gpus)
        if workers < 1:
            raise RuntimeError("label_dataset: num_gpus is set but the Ray cluster has no GPU")
    else:
        # One CPU per machine stays free for the tasks that read and write
        # the data: actors that hold every CPU would wait forever for input.
        workers = num_workers or max(1, _per_node("CPU", max(1, threads), keep=1))
    kw = dict(compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=threads)
    if num_gpus:
        kw["num_gpus"] = num_gpus
    if max_retries is not None:
        kw["max_restarts"] = max_retries
        kw["max_task_retries"] = max_retries
    return workers, kw


def label_dataset(ds, column="text", *, id_column="id", model="default", database=None,
                  batch_size=DEFAULT_BATCH_SIZE, num_workers=None, threads=1, num_gpus=0,
                  device=None, precision=None, max_length=None, encoder_batch_size=None,
                  prefix=None, max_retries=None, labeller_cls=Labeller, labeller_kwargs=None):
    """Labels column of the Ray Dataset ds; returns the labelled Dataset
    (lazy, as Ray Data is: write_parquet, take_all, iter_batches run it).
    See the module's documentation for the arguments. labeller_cls (a
    subclass of Labeller) and labeller_kwargs (extra arguments of its
    constructor) change what each worker does."""
    import ray

    # Checked here when the schema is known without running anything (files'
    # metadata, in-memory data): a job that fails in its workers keeps them
    # a while, so an error is best said before any starts.
    columns = ds.columns(fetch_if_missing=False)
    if columns is not None:
        prefix = _choose_prefix(columns, prefix)
        _check_columns(columns, column, id_column, _output_names(prefix))
    name, files = _resolve_model(model, database)
    files_ref = ray.put(files) if files is not None else None
    _, kw = _pool_args(num_workers, threads, num_gpus, max_retries)
    return ds.map_batches(
        labeller_cls, batch_size=batch_size, batch_format="pyarrow",
        fn_constructor_kwargs=dict(column=column, id_column=id_column, model=name,
                                   model_files=files_ref, prefix=prefix, device=device,
                                   threads=threads, encoder_batch_size=encoder_batch_size,
                                   max_length=max_length, precision=precision,
                                   use_gpu=bool(num_gpus), **(labeller_kwargs or {})),
        **kw)


# ---------------------------------------------------------------- SQLite shards

def _table_exists(conn, schema, name):
    return conn.execute(f"SELECT 1 FROM {schema}.sqlite_schema WHERE type = 'table' AND name = ?",
                        (name,)).fetchone() is not None


def label_sqlite_file(engine, path, table, column, out_table, *, id_column=None,
                      chunk_rows=DEFAULT_SHARD_CHUNK, on_chunk=None):
    """Labels one file in place with engine (see label_sqlite_files).
    Returns {"path", "status": "labelled" | "skipped", "rows", "errors",
    "seconds"}; raises on a file that cannot be labelled.
    on_chunk(path, rows_done) is called after each committed chunk."""
    t0 = time.monotonic()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"label_sqlite_files: no database file {path!r}")
    staging = "sentiment_staging_" + out_table
    conn = engine.conn
    conn.execute("ATTACH DATABASE ? AS shard", (path,))
    try:
        if _table_exists(conn, "shard", out_table):
            rows, errors = conn.execute(f"SELECT count(*), count(error) FROM shard.{_quote(out_table)}"
                                        ).fetchone()
            return dict(path=path, status="skipped", rows=rows, errors=errors,
                        seconds=time.monotonic() - t0)
        if not _table_exists(conn, "shard", table):
            raise LookupError(f"label_sqlite_files: {path}: no table {table!r}")
        cols = [r[1] for r in conn.execute(f"PRAGMA shard.table_info({_quote(table)})")]
        for want in [column] + ([id_column] if id_column else []):
            if want not in cols:
                raise LookupError(f"label_sqlite_files: {path}: table {table!r} has no column "
                                  f"{want!r}; columns: {cols}")
        src, col = f"shard.{_quote(table)}", _quote(column)
        id_expr = _quote(id_column) if id_column else "rowid"
        id_decl = "id" if id_column else "id INTEGER PRIMARY KEY"
        # A staging table left by a killed run is started again.
        conn.execute(f"DROP TABLE IF EXISTS shard.{_quote(staging)}")
        conn.execute(f"CREATE TABLE shard.{_quote(staging)}({id_decl}, label TEXT, score REAL, "
                     "probs TEXT, truncated INTEGER, error TEXT)")
        # Text is read as bytes, so invalid UTF-8 is seen (and said) here.
        select = (f"SELECT rowid, {id_expr}, CASE typeof({col}) WHEN 'text' THEN "
                  f"CAST({col} AS BLOB) ELSE {col} END, typeof({col}) FROM {src} "
                  "WHERE rowid > ? ORDER BY rowid LIMIT ?")
        insert = f"INSERT INTO shard.{_quote(staging)} VALUES (?, ?, ?, ?, ?, ?)"
        last, done, errors = None, 0, 0
        while True:
            try:
                chunk = conn.execute(select, (last if last is not None else -2**63, chunk_rows)
                                     ).fetchall()
            except sqlite3.OperationalError as e:
                if "rowid" in str(e):
                    raise LookupError(f"label_sqlite_files: {path}: table {table!r} has no rowid "
                                      "(WITHOUT ROWID); not supported") from e
                raise
            if not chunk:
                break
            values = []
            for _, _, v, kind in chunk:
                # A TEXT value comes as its bytes; a BLOB stays bytes (UTF-8
                # text, as classify reads it); numbers are not text.
                values.append(v if kind in ("text", "blob", "null") else _NotText(kind))
            labels = engine.label(values)
            out = [(r[1],) + tuple(x[i] for x in labels) for i, r in enumerate(chunk)]
            errors += sum(1 for o in out if o[5] is not None)
            conn.execute("BEGIN")
            try:
                conn.executemany(insert, out)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            last = chunk[-1][0]
            done += len(chunk)
            if on_chunk is not None:
                on_chunk(path, done)
        # The one step that makes the output visible.
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(f"ALTER TABLE shard.{_quote(staging)} RENAME TO {_quote(out_table)}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return dict(path=path, status="labelled", rows=done, errors=errors,
                    seconds=time.monotonic() - t0)
    finally:
        conn.execute("DETACH DATABASE shard")


class ShardLabeller:
    """The callable class label_sqlite_files gives map_batches: one engine
    per actor; each batch is a list of paths, each labelled in place.
    on_chunk(path, rows_done) runs after each committed chunk (a hook for
    progress reporting; a no-op here)."""

    def __init__(self, table, column, out_table, model="default", model_files=None, *,
                 id_column=None, chunk_rows=DEFAULT_SHARD_CHUNK, device=None, threads=1,
                 encoder_batch_size=None, max_length=None, precision=None, use_gpu=False):
        if model_files is not None and not isinstance(model_files, ModelFiles):
            import ray
            model_files = ray.get(model_files)
        if use_gpu and device is None:
            device = "cuda:0"
            if encoder_batch_size is None:
                encoder_batch_size = DEFAULT_GPU_ENCODER_BATCH
        self.args = (table, column, out_table)
        self.id_column = id_column
        self.chunk_rows = chunk_rows
        self.engine = Engine(model, model_files, device=device, threads=threads,
                             encoder_batch_size=encoder_batch_size, max_length=max_length,
                             precision=precision)

    def on_chunk(self, path, rows_done):
        pass

    def __call__(self, batch):
        reports = []
        for path in list(batch["path"]):
            try:
                r = label_sqlite_file(self.engine, str(path), *self.args,
                                      id_column=self.id_column, chunk_rows=self.chunk_rows,
                                      on_chunk=self.on_chunk)
                r["error"] = None
            except (OSError, LookupError, sqlite3.Error) as e:
                r = dict(path=str(path), status="failed", rows=0, errors=0, seconds=0.0,
                         error=f"{type(e).__name__}: {e}")
            reports.append(r)
        return {k: [r[k] for r in reports] for k in
                ("path", "status", "rows", "errors", "seconds", "error")}


class ShardsFailed(RuntimeError):
    """Some files could not be labelled; .report has every file's entry."""

    def __init__(self, report):
        failed = [r for r in report if r["status"] == "failed"]
        super().__init__(f"label_sqlite_files: {len(failed)} of {len(report)} files failed; "
                         f"first: {failed[0]['path']}: {failed[0]['error']}")
        self.report = report


def label_sqlite_files(paths, table, column, out_table, *, id_column=None, model="default",
                       database=None, num_workers=None, threads=1, num_gpus=0, device=None,
                       precision=None, max_length=None, encoder_batch_size=None,
                       chunk_rows=DEFAULT_SHARD_CHUNK, max_retries=None,
                       labeller_cls=ShardLabeller, labeller_kwargs=None, raise_on_failure=True):
    """Labels table.column of every SQLite file in paths into out_table, one
    file per task (see the module's documentation). Returns one dict per
    file, in the order of paths: path, status (labelled, skipped, failed),
    rows, errors (rows with an error), seconds, error (why it failed)."""
    import ray

    paths = [os.path.abspath(os.fspath(p)) for p in paths]
    if len(set(paths)) != len(paths):
        raise ValueError("label_sqlite_files: a file is listed twice")
    if not paths:
        return []
    name, files = _resolve_model(model, database)
    files_ref = ray.put(files) if files is not None else None
    workers, kw = _pool_args(num_workers, threads, num_gpus, max_retries)
    ds = ray.data.from_items([{"path": p} for p in paths], override_num_blocks=len(paths))
    out = ds.map_batches(
        labeller_cls, batch_size=1, batch_format="numpy",
        fn_constructor_kwargs=dict(table=table, column=column, out_table=out_table, model=name,
                                   model_files=files_ref, id_column=id_column,
                                   chunk_rows=chunk_rows, device=device, threads=threads,
                                   encoder_batch_size=encoder_batch_size, max_length=max_length,
                                   precision=precision, use_gpu=bool(num_gpus),
                                   **(labeller_kwargs or {})),
        **kw)
    by_path = {}
    for r in out.take_all():
        by_path[r["path"]] = {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
    report = [by_path[p] for p in paths]
    if raise_on_failure and any(r["status"] == "failed" for r in report):
        raise ShardsFailed(report)
    return report

