"""Streaming readers and writers of the files the command line labels: CSV,
TSV, JSON Lines and (with pyarrow) Parquet.

A reader yields chunks of at most N rows, so memory stays constant in the
number of rows. Each good row gives its text (str or None) and the row itself
(a list of values aligned with the header for CSV/TSV, a dict for JSON Lines,
a slice of a record batch for Parquet). A row that cannot be read is a
BadRow: what the row is ("row 17 (line 18)") and what was wrong; the caller
decides whether to stop or skip it.

Formats:
  csv    RFC 4180: comma, double quotes (strict: a stray quote is an error),
         a header line. Every row must have as many fields as the header.
  tsv    tab-separated, no quoting (as the IANA text/tab-separated-values
         type and most TSV data): a header line, no tab or line break inside
         a field; writing a field that holds one is an error.
  jsonl  one JSON object per line (.jsonl, .ndjson); blank lines skipped.
  parquet  with pyarrow (pip install pyarrow); the text column must be a
         string column.
Encoding: UTF-8 by default, a byte-order mark (as Excel writes) skipped;
when the first MiB is not valid UTF-8 but is valid GB18030 (what Chinese
Excel and Windows write), the file is read as GB18030 (`detected` says so).
`encoding` names another (any Python codec name). Bytes invalid in the
encoding are replaced by U+FFFD (as the extension does for invalid UTF-8)
and counted (`replaced_bytes`); a row in which more than
MAX_REPLACED_BYTES bytes had to be replaced is a BadRow (the file is
most likely in another encoding).
"""

import codecs
import csv
import io
import json
import os
import re
import sys

FORMATS = ("csv", "tsv", "jsonl", "parquet")
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl",
               ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}

# One field or JSON line larger than this is a bad row, not a memory blow-up.
MAX_FIELD_BYTES = 16 << 20
# A row with more bytes than this replaced by U+FFFD is refused: a stray
# byte is repaired, a text in another encoding is not turned into U+FFFDs.
MAX_REPLACED_BYTES = 3
# How much of the input the encoding is guessed from.
SNIFF_BYTES = 1 << 20


class BadRow(Exception):
    """A row that cannot be read: where (`where`) and what was wrong."""

    def __init__(self, where, why):
        super().__init__(f"{where}: {why}")
        self.where, self.why = where, why


class InputError(Exception):
    """The input as a whole cannot be read (not a Parquet file, no such
    column, ...). `usage`: the command line is at fault (a column or format
    that is not there), not the data."""

    def __init__(self, msg, usage=False):
        super().__init__(msg)
        self.usage = usage


def format_of(path, given=None):
    """The format named by --format, else by the file's extension; CSV for
    stdin ('-'), as csvkit does."""
    if given:
        return given
    if path == "-":
        return "csv"
    ext = os.path.splitext(path)[1].lower()
    if ext in _EXTENSIONS:
        return _EXTENSIONS[ext]
    raise InputError(f"cannot tell the format of {path!r} from its extension; "
                     f"give --format ({', '.join(FORMATS)})", usage=True)


def check_encoding(name):
    """The codec's canonical name, or InputError (usage) for an unknown one."""
    try:
        info = codecs.lookup(name)
    except LookupError:
        raise InputError(f"--encoding {name}: unknown encoding (e.g. utf-8, gb18030, big5)",
                         usage=True)
    try:
        "x".encode(info.name).decode(info.name)
    except Exception:
        raise InputError(f"--encoding {name}: not a text encoding", usage=True)
    return info.name


def _valid_prefix(data, encoding):
    """Whether data is valid in encoding (a character cut off at the end
    is allowed)."""
    try:
        codecs.getincrementaldecoder(encoding)().decode(data, final=False)
        return True
    except UnicodeDecodeError:
        return False


class _CountingRaw(io.RawIOBase):
    """A binary stream that counts the bytes read from it (for progress)."""

    def __init__(self, f):
        self.f, self.n = f, 0

    def readable(self):
        return True

    def readinto(self, b):
        n = self.f.readinto(b)
        self.n += n or 0
        return n


class Reader:
    """Base: opens `path` ('-' for stdin) and counts bytes read. `column` is
    the text column; `also` lists other columns every row must have.
    `encoding`: None to detect (UTF-8, else GB18030), or a codec name."""

    def __init__(self, path, column, also=(), encoding=None):
        self.path, self.column, self.also = path, column, tuple(also)
        self.name = "<stdin>" if path == "-" else path
        self.replaced = [0]          # bytes replaced in the whole input
        self._row_replaced = [0]     # in the row being read
        if path == "-":
            raw = sys.stdin.buffer
            self.size = None
        else:
            raw = open(path, "rb")
            self.size = os.fstat(raw.fileno()).st_size
        self._raw = _CountingRaw(raw)
        self._buf = io.BufferedReader(self._raw, SNIFF_BYTES)
        self.columns = None
        self.detected = None
        if encoding is not None:
            self.encoding = check_encoding(encoding)
        else:
            self.encoding = "utf-8"
            sample = self._buf.peek(SNIFF_BYTES)
            if not sample.startswith(codecs.BOM_UTF8) and not _valid_prefix(sample, "utf-8") \
                    and _valid_prefix(sample, "gb18030"):
                self.encoding = self.detected = "gb18030"
        self._errors = f"sqlite_sentiment.replace.{id(self)}"
        total, row = self.replaced, self._row_replaced

        def handler(err):
            n = err.end - err.start
            total[0] += n
            row[0] += n
            return ("\ufffd", err.end)
        codecs.register_error(self._errors, handler)

    def bytes_read(self):
        return self._raw.n

    def _decode(self, line, first):
        try:
            s = line.decode(self.encoding)
        except UnicodeDecodeError:
            s = line.decode(self.encoding, self._errors)
        if first and s.startswith("\ufeff"):
            s = s[1:]                # a byte-order mark
        return s

    def text_lines(self):
        """The input's lines, decoded (each with its line end)."""
        first = True
        for line in self._buf:
            yield self._decode(line, first)
            first = False

    def _too_many_replaced(self, text):
        """Why a row whose decoding replaced too many bytes is refused, or
        None. The count is reset for the next row."""
        n = self._row_replaced[0]
        self._row_replaced[0] = 0
        if n <= MAX_REPLACED_BYTES or not (isinstance(text, str) and "\ufffd" in text):
            return None
        self.replaced[0] -= n        # the row is not used
        hint = ("give --encoding (e.g. gb18030, big5)" if self.detected is None else
                "give --encoding")
        return (f"{n} bytes are not valid {self.encoding.upper()}; read anyway they would "
                f"change the text to U+FFFD characters; is the file in another encoding? {hint}")

    @property
    def replaced_bytes(self):
        return self.replaced[0]

    def chunks(self, size, on_bad):
        """Yields (texts, rows) of at most `size` good rows; each BadRow is
        passed to on_bad, which raises to stop or returns to skip it."""
        texts, rows = [], []
        for item in self.rows():
            if isinstance(item, BadRow):
                on_bad(item)
                continue
            texts.append(item[0])
            rows.append(item[1])
            if len(rows) >= size:
                yield texts, rows
                texts, rows = [], []
        if rows:
            yield texts, rows

    def close(self):
        if self.path != "-":
            self._raw.f.close()


class DelimitedReader(Reader):
    """CSV and TSV: rows are lists aligned with `columns` (the header)."""

    def __init__(self, path, column, fmt, also=(), encoding=None):
        super().__init__(path, column, also, encoding)
        self.fmt = fmt
        csv.field_size_limit(MAX_FIELD_BYTES)
        if fmt == "tsv":
            kw = dict(delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            kw = dict(strict=True)
        self._csv = csv.reader(self.text_lines(), **kw)
        self._line = 0
        self.columns = self._header()
        self.text_index = None
        if self.columns is not None:
            for c in (column, *self.also):
                if c not in self.columns:
                    raise InputError(f"{self.name}: no column {c!r}; the header has: "
                                     + ", ".join(repr(c) for c in self.columns), usage=True)
            self.text_index = self.columns.index(column)
        self.row_number = 0

    def _header(self):
        while True:
            try:
                row = next(self._csv)
            except StopIteration:
                return None     # an empty file
            except csv.Error as e:
                raise InputError(f"{self.name}: line {self._csv.line_num}: header: {e}")
            self._line = self._csv.line_num
            if row:
                self._row_replaced[0] = 0
                return row

    def rows(self):
        """Yields (text, row) or BadRow, one per record, blank lines skipped."""
        if self.columns is None:
            return
        n = len(self.columns)
        i = self.text_index
        while True:
            start = self._line + 1
            try:
                row = next(self._csv)
            except StopIteration:
                return
            except csv.Error as e:
                self.row_number += 1
                self._line = self._csv.line_num
                self._row_replaced[0] = 0
                yield BadRow(self._where(start), str(e))
                continue
            self._line = self._csv.line_num
            if not row:
                continue
            self.row_number += 1
            if len(row) == n:
                why = self._too_many_replaced(row[i])
                if why:
                    yield BadRow(self._where(start), why)
                    continue
            else:
                self._row_replaced[0] = 0
            if len(row) != n:
                yield BadRow(self._where(start),
                             f"{len(row)} field{'s' if len(row) != 1 else ''}, "
                             f"the header has {n}")
                continue
            yield row[i], row

    def _where(self, start):
        lines = f"line {start}" if start >= self._line else f"lines {start}-{self._line}"
        return f"{self.name}: row {self.row_number} ({lines})"


class JsonLinesReader(Reader):
    """JSON Lines: rows are dicts."""

    def __init__(self, path, column, also=(), encoding=None):
        super().__init__(path, column, also, encoding)
        self.row_number = 0

    def rows(self):
        col = self.column
        line_no = 0
        read = self._buf.readline
        while True:
            raw = read(MAX_FIELD_BYTES + 1)
            if not raw:
                return
            line_no += 1
            if len(raw) > MAX_FIELD_BYTES and not raw.endswith(b"\n"):
                while True:     # skip the rest of the line
                    more = read(1 << 20)
                    if not more or more.endswith(b"\n"):
                        break
                self.row_number += 1
                yield BadRow(self._where(line_no), f"line longer than {MAX_FIELD_BYTES >> 20} MiB")
                continue
            self._row_replaced[0] = 0
            line = self._decode(raw, line_no == 1)
            if not line.strip():
                continue
            self.row_number += 1
            try:
                obj = json.loads(line)
            except ValueError as e:
                yield BadRow(self._where(line_no), f"not valid JSON: {e}")
                continue
            except RecursionError:
                yield BadRow(self._where(line_no), "not valid JSON here: nested too deeply")
                continue
            if not isinstance(obj, dict):
                yield BadRow(self._where(line_no),
                             f"a JSON {_json_kind(obj)}, expected an object")
                continue
            if col not in obj:
                keys = ", ".join(repr(k) for k in list(obj)[:20])
                yield BadRow(self._where(line_no), f"no key {col!r} (keys: {keys or 'none'})")
                continue
            text = obj[col]
            if text is not None and not isinstance(text, str):
                if isinstance(text, (int, float)) and not isinstance(text, bool):
                    text = json.dumps(text)
                else:
                    yield BadRow(self._where(line_no),
                                 f"{col!r} is a JSON {_json_kind(text)}, expected a string")
                    continue
            bad = self._check_also(obj) or self._too_many_replaced(text)
            if bad:
                yield BadRow(self._where(line_no), bad)
                continue
            yield text, obj

    def _check_also(self, obj):
        for c in self.also:
            if c not in obj:
                keys = ", ".join(repr(k) for k in list(obj)[:20])
                return f"no key {c!r} (keys: {keys or 'none'})"
            v = obj[c]
            if isinstance(v, (dict, list)):
                return f"{c!r} is a JSON {_json_kind(v)}, expected a string or number"
        return None

    def _where(self, line_no):
        return f"{self.name}: row {self.row_number} (line {line_no})"


def _json_kind(v):
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    if isinstance(v, str):
        return "string"
    if v is None:
        return "null"
    return "number"


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise InputError("Parquet needs pyarrow, which is not installed: pip install pyarrow",
                         usage=True)
    return pyarrow


def pyarrow_or_usage_error():
    """pyarrow, or InputError (usage: exit status 2) saying to install it."""
    return _pyarrow()


class ParquetReader:
    """Parquet: chunks are record batches; every row is good."""

    def __init__(self, path, column, also=(), encoding=None):
        pa = _pyarrow()
        if path == "-":
            raise InputError("Parquet cannot be read from stdin; give a file")
        self.name, self.column = path, column
        try:
            self._file = pa.parquet.ParquetFile(path)
        except (pa.ArrowException, OSError) as e:
            raise InputError(f"{path}: not a readable Parquet file: {e}")
        schema = self._file.schema_arrow
        self.columns = schema.names
        for c in (column, *also):
            if c not in self.columns:
                raise InputError(f"{path}: no column {c!r}; the file has: "
                                 + ", ".join(repr(c) for c in self.columns), usage=True)
        t = schema.field(column).type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise InputError(f"{path}: column {column!r} is {t}, expected a string column")
        self.schema = schema
        self.size = self._file.metadata.num_rows   # progress in rows
        self.row_number = 0
        self.replaced_bytes = 0
        self.detected = None

    def bytes_read(self):
        return self.row_number

    def chunks(self, size, on_bad):
        for batch in self._file.iter_batches(batch_size=size):
            texts = batch.column(self.column).to_pylist()
            self.row_number += batch.num_rows
            yield texts, batch

    def close(self):
        close = getattr(self._file, "close", None)
        if close:
            close()


def open_reader(path, fmt, column, also=(), encoding=None):
    """A reader of `path` ('-': stdin) whose rows give the text of `column`;
    every row must also have the columns in `also`. `encoding`: see the
    module's documentation (not for Parquet)."""
    if path != "-" and not os.path.exists(path):
        raise InputError(f"{path}: no such file", usage=True)
    if path != "-" and os.path.isdir(path):
        raise InputError(f"{path}: a directory, expected a file", usage=True)
    if fmt == "parquet":
        return ParquetReader(path, column, also)
    if fmt in ("csv", "tsv"):
        return DelimitedReader(path, column, fmt, also, encoding)
    if fmt == "jsonl":
        return JsonLinesReader(path, column, also, encoding)
    raise InputError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}", usage=True)


def column_values(reader, rows, name):
    """The values of column `name` in a chunk's rows."""
    if isinstance(rows, list):
        if rows and isinstance(rows[0], dict):
            return [r[name] for r in rows]
        j = reader.columns.index(name)
        return [r[j] for r in rows]
    return rows.column(name).to_pylist()     # a record batch



class OutputError(Exception):
    """A row that the output format cannot hold."""


_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)\Z")

# The prefix label takes when an added name is already a column of the
# input and --prefix was not given; then pred2_, pred3_, ...
DEFAULT_PREFIX = "pred_"


class AddedColumns:
    """Names of what label adds to each row: label, score and, per label of
    the model, prob_<label> (CSV, TSV, Parquet) or one probs object (JSON
    Lines); all with the given prefix. int_labels: every label of the model
    is a whole number (a model trained on integer labels), so JSON Lines and
    Parquet write the label as a number, as the input had it."""

    def __init__(self, prefix, labels):
        self.labels = list(labels)
        self.int_labels = bool(self.labels) and all(_INTEGER.match(l) for l in self.labels)
        self.set_prefix(prefix)

    def set_prefix(self, prefix):
        self.prefix = prefix
        self.label = prefix + "label"
        self.score = prefix + "score"
        self.probs = prefix + "probs"
        self.prob_columns = [prefix + "prob_" + l for l in self.labels]

    def names(self, fmt):
        if fmt == "jsonl":
            return [self.label, self.score, self.probs]
        return [self.label, self.score, *self.prob_columns]

    def clashes(self, columns, fmt):
        taken = set(columns)
        return [n for n in self.names(fmt) if n in taken]

    def avoid(self, columns, fmt):
        """Sets a prefix under which no added name is one of columns (the
        input's): DEFAULT_PREFIX, else pred2_, pred3_, ... Returns the
        names that clashed under the current prefix ([] when none did and
        nothing changed)."""
        clash = self.clashes(columns, fmt)
        if clash:
            k = 1
            while True:
                p = DEFAULT_PREFIX if k == 1 else f"pred{k}_"
                self.set_prefix(p)
                if not self.clashes(columns, fmt):
                    break
                k += 1
        return clash

    def label_value(self, label):
        """The label as it is written to JSON Lines and Parquet."""
        return int(label) if self.int_labels and label is not None else label


def _cell(v):
    """A JSON or Parquet value as a CSV/TSV field."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, int, float, list, dict)):
        return json.dumps(v, ensure_ascii=False, default=str)
    return str(v)          # dates, times, decimals, bytes from Parquet


def _text(v):
    return "" if v is None else v if isinstance(v, str) else str(v)


class DelimitedWriter:
    """CSV or TSV out. Rows: lists aligned with in_columns, or dicts (their
    keys become the header; every row must have the same keys). Results:
    (label, score, probs JSON, one probability per label)."""

    def __init__(self, fmt, stream, in_columns, added):
        self.fmt, self.added, self.stream = fmt, added, stream
        self._csv = None if fmt == "tsv" else csv.writer(stream, lineterminator="\n")
        self._header = None
        if in_columns is not None:
            self._write_header(in_columns)

    def _write_header(self, columns):
        self._header = list(columns)
        row = [*map(str, columns), *self.added.names(self.fmt)]
        self._tabs = len(row) - 1
        self._write([row], lambda k: "the header")

    def _write(self, rows, where):
        if self._csv is not None:
            self._csv.writerows(rows)
            return
        # TSV has no quoting: a value holding a tab or a line break cannot
        # be written. One check per line, on the joined text.
        lines = []
        for k, row in enumerate(rows):
            line = "\t".join(row)           # every value a str (write())
            if line.count("\t") != self._tabs or "\n" in line or "\r" in line:
                raise OutputError(f"{where(k)}: a value holds a tab or line break, which "
                                  "TSV cannot carry; write CSV or JSON Lines instead")
            lines.append(line)
        self.stream.write("\n".join(lines) + "\n")

    def write(self, rows, results, where):
        if not isinstance(rows, list):
            rows = rows.to_pylist()      # a Parquet record batch
        tsv = self._csv is None
        out = []
        for k, (row, res) in enumerate(zip(rows, results)):
            if isinstance(row, dict):
                if self._header is None:
                    self._write_header(list(row))
                if list(row) != self._header:
                    raise OutputError(
                        f"{where(k)}: its keys differ from the first row's ("
                        + ", ".join(self._header) + f"); {self.fmt.upper()} needs the "
                        "same columns in every row")
                row = [_cell(v) for v in row.values()]
            if tsv:
                out.append([*row, *map(_text, res[:2]), *map(_text, res[3:])])
            else:
                out.append([*row, *res[:2], *res[3:]])
        if out:
            self._write(out, where)

    def close(self):
        pass


class JsonLinesWriter:
    """JSON Lines out: each row's object with label, score and probs added
    (the extension's JSON object, copied as it is). A row that has a key of
    the added names itself is an error: no object gets a key twice."""

    def __init__(self, stream, in_columns, added):
        self.stream, self.in_columns, self.added = stream, in_columns, added

    def write(self, rows, results, where):
        if not isinstance(rows, list):
            rows = rows.to_pylist()      # a Parquet record batch
        a = self.added
        dumps = json.dumps
        names = (a.label, a.score, a.probs)
        kl, ks, kp = (dumps(k, ensure_ascii=False) for k in names)
        out = []
        for k, (row, (label, score, probs, *_)) in enumerate(zip(rows, results)):
            obj = dict(zip(self.in_columns, row)) if isinstance(row, list) else row
            if a.label in obj or a.score in obj or a.probs in obj:
                key = next(n for n in names if n in obj)
                raise OutputError(f"{where(k)}: the row has a key {key!r} of its own, which "
                                  "the added keys would repeat; name them with --prefix")
            head = dumps(obj, ensure_ascii=False, default=str)[:-1]
            sep = ", " if len(head) > 1 else ""
            out.append(f"{head}{sep}{kl}: {dumps(a.label_value(label), ensure_ascii=False)}, "
                       f"{ks}: {dumps(score)}, {kp}: {'null' if probs is None else probs}}}")
        if out:
            self.stream.write("\n".join(out) + "\n")

    def close(self):
        pass


class ParquetWriter:
    """Parquet out: the input's columns (their Arrow types when the input is
    Parquet, strings from CSV/TSV, inferred from JSON Lines), label (string),
    score and prob_<label> (float64)."""

    def __init__(self, sink, in_columns, added, in_schema=None):
        self.pa = _pyarrow()
        self.path, self.in_columns, self.added = sink, in_columns, added
        self.in_schema = in_schema
        self._writer = None

    def _result_arrays(self, results):
        pa = self.pa
        if self.added.int_labels:
            labels = pa.array([self.added.label_value(r[0]) for r in results], pa.int64())
        else:
            labels = pa.array([r[0] for r in results], pa.string())
        arrays = [labels, pa.array([r[1] for r in results], pa.float64())]
        for j in range(len(self.added.labels)):
            arrays.append(pa.array([r[3 + j] for r in results], pa.float64()))
        return arrays

    def write(self, rows, results, where):
        pa = self.pa
        try:
            if isinstance(rows, pa.RecordBatch):
                batch = rows
            elif rows and isinstance(rows[0], list):
                batch = pa.RecordBatch.from_arrays(
                    [pa.array([r[j] for r in rows], pa.string())
                     for j in range(len(self.in_columns))], names=self.in_columns)
            else:
                batch = pa.RecordBatch.from_pylist(rows)
            out = pa.RecordBatch.from_arrays(
                list(batch.columns) + self._result_arrays(results),
                names=list(batch.schema.names) + self.added.names("parquet"))
            if self._writer is None:
                self._writer = pa.parquet.ParquetWriter(self.path, out.schema)
            self._writer.write_batch(out)
        except (pa.ArrowException, ValueError, TypeError) as e:
            raise OutputError(f"{where(0)} and after: cannot be written to Parquet: {e}")

    def close(self):
        pa = self.pa
        if self._writer is None:
            # No rows: still a Parquet file with the columns, when known.
            if self.in_schema is not None:
                fields = list(self.in_schema)
            else:
                fields = [pa.field(c, pa.string()) for c in (self.in_columns or [])]
            fields += [pa.field(self.added.label,
                                pa.int64() if self.added.int_labels else pa.string()),
                       pa.field(self.added.score, pa.float64())]
            fields += [pa.field(c, pa.float64()) for c in self.added.prob_columns]
            self._writer = pa.parquet.ParquetWriter(self.path, pa.schema(fields))
        self._writer.close()


def open_writer(fmt, stream_or_path, reader, added):
    in_columns = reader.columns
    if fmt == "parquet":
        return ParquetWriter(stream_or_path, in_columns, added,
                             getattr(reader, "schema", None))
    if fmt == "jsonl":
        return JsonLinesWriter(stream_or_path, in_columns, added)
    return DelimitedWriter(fmt, stream_or_path, in_columns, added)
