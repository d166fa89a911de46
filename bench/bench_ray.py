#!/usr/bin/env python3
"""Rows/s through Ray (sqlite_sentiment.ray.label_dataset) against classify in
one process, on the same rows in the same run.

    scripts/test-scaleout.sh            # once: builds build/scaleout-venv
    build/scaleout-venv/bin/python bench/bench_ray.py [--rows 50000] [--runs 3]
        [--workers 2] [--batch-size 1024] [--data ../shared/data] [--model DIR]

What one run does, on a local Ray cluster of --workers CPUs:
1. Rows: the scale-out tests' corpus (python/tests_scaleout/reviews.py: every
   waimai_10k review, then an evenly spaced sample of online_shopping_10_cats),
   built at run time from the data directory, never stored in the repository.
2. In one process: one sqlite3 connection, sentiment_config('threads',
   workers), the rows in a table, every row of classify('t', 'text') fetched.
3. Through Ray: the rows as a materialized Dataset of 4 x workers blocks,
   label_dataset(num_workers=workers, threads=1).materialize(). Two figures:
   end to end (call to last row, actor start-up and model load included) and
   steady (rows over the span from the first batch's start to the last
   batch's end, from timestamps the workers record: Ray's scheduling between
   batches counted, the once-per-job start-up not).
4. The two alternate, --runs times each; medians are reported, with the
   labels of the two compared row by row.
--model DIR runs a Hugging Face model directory instead of the built-in model
(sentiment_load in the one process, ModelFiles.from_directory for Ray): with
the smallest fixture model (tests/fixtures/models/bert_tiny) the figures are
close to the ceiling of everything outside the encoder, what a GPU worker
meets however fast its GPU (bench/bench_cpu_side.sh measures the encoder's
share of such a run).
Prints a Markdown section (for bench/RESULTS.md) and writes it to
bench/out/ray-<time>.md.
"""

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python", "tests_scaleout"))

import sqlite_sentiment  # noqa: E402
import sqlite_sentiment.ray as sr  # noqa: E402


class TimedLabeller(sr.Labeller):
    """A Labeller that records when each batch started and ended."""

    def __call__(self, batch):
        import pyarrow as pa
        t0 = time.time()
        out = super().__call__(batch)
        t1 = time.time()
        n = out.num_rows
        out = out.append_column("bench_t0", pa.array([t0] * n, pa.float64()))
        return out.append_column("bench_t1", pa.array([t1] * n, pa.float64()))


def in_process(rows, threads, model_dir):
    conn = sqlite3.connect(":memory:")
    sqlite_sentiment.load(conn)
    conn.execute("SELECT sentiment_config('threads', ?)", (threads,))
    name = "default"
    if model_dir:
        name = "bench"
        conn.execute("SELECT sentiment_load(?, ?)", (name, model_dir))
    conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [r[:2] for r in rows])
    conn.execute("SELECT sentiment('x', ?)", (name,)).fetchone()  # model loaded outside the timing
    t0 = time.monotonic()
    out = conn.execute("SELECT id, label, score, probs, truncated FROM classify('t', 'text', ?)",
                       (name,)).fetchall()
    seconds = time.monotonic() - t0
    device = conn.execute("SELECT sentiment_device()").fetchone()[0]
    conn.close()
    return len(rows) / seconds, {r[0]: r[1] for r in out}, device


def through_ray(ds, n, workers, batch_size, model_dir):
    model = sr.ModelFiles.from_directory(model_dir) if model_dir else "default"
    t0 = time.monotonic()
    out = sr.label_dataset(ds, column="text", model=model, num_workers=workers, threads=1,
                           batch_size=batch_size, labeller_cls=TimedLabeller).materialize()
    seconds = time.monotonic() - t0
    tab = out.to_arrow_refs()
    import pyarrow as pa
    import ray
    table = pa.concat_tables(ray.get(tab))
    assert table.num_rows == n, (table.num_rows, n)
    starts, ends = table.column("bench_t0").to_pylist(), table.column("bench_t1").to_pylist()
    steady = n / (max(ends) - min(starts))
    labels = dict(zip(table.column("id").to_pylist(), table.column("label").to_pylist()))
    return n / seconds, steady, labels


def fmt(x):
    return f"{x:,.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=sr.DEFAULT_BATCH_SIZE)
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data"))
    ap.add_argument("--model", default=None, help="a model directory (default: the built-in model)")
    a = ap.parse_args()
    model_dir = os.path.abspath(a.model) if a.model else None
    os.environ["SENTIMENT_DATA_DIR"] = os.path.abspath(a.data)
    import reviews
    reviews.DATA_DIR = os.environ["SENTIMENT_DATA_DIR"]
    rows = reviews.reviews(a.rows)
    chars = sum(len(r[1]) for r in rows) / len(rows)
    source = reviews.source().replace(reviews.DATA_DIR, os.path.relpath(reviews.DATA_DIR, ROOT))

    import pyarrow as pa
    import ray
    import ray.data
    ray.init(num_cpus=a.workers, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": HERE}})
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ds = ray.data.from_arrow(pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows]})
                             ).repartition(4 * a.workers).materialize()
    load_start = os.getloadavg()
    one, e2e, steady, differ = [], [], [], []
    device = ""
    for run in range(a.runs):
        rate, ref, device = in_process(rows, a.workers, model_dir)
        one.append(rate)
        r_e2e, r_steady, labels = through_ray(ds, len(rows), a.workers, a.batch_size, model_dir)
        e2e.append(r_e2e)
        steady.append(r_steady)
        differ.append(sum(1 for i in ref if labels[i] != ref[i]))
        print(f"run {run + 1}: one process {rate:.0f} rows/s, Ray end to end {r_e2e:.0f}, "
              f"steady {r_steady:.0f}; labels differing {differ[-1]}", file=sys.stderr)
    load_end = os.getloadavg()
    ray.shutdown()

    m_one, m_e2e, m_steady = (statistics.median(x) for x in (one, e2e, steady))
    per_core = m_steady / a.workers
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [
        f"## Through Ray Data: `label_dataset` against `classify` in one process "
        f"({time.strftime('%Y-%m-%d %H:%M')})",
        "",
        f"`build/scaleout-venv/bin/python bench/bench_ray.py --rows {a.rows} --runs {a.runs} "
        f"--workers {a.workers} --batch-size {a.batch_size}"
        f"{' --model ' + a.model if a.model else ''}`; Ray {ray.__version__}, "
        f"sentiment {sqlite_sentiment.__version__}, {cpu}, {os.cpu_count()} cores; "
        f"load average at the start {load_start[0]:.2f}, at the end {load_end[0]:.2f}.",
        f"Rows: {len(rows):,} reviews ({source}; {chars:.1f} characters on average), "
        f"{'model ' + a.model if a.model else 'built-in model'}, device `{device}` in the one-process run (each Ray worker: the same "
        "with 1 thread). Median of the runs, rows/s (each run's figures in the order they ran: "
        "one process, Ray):",
        "",
        "| | rows/s | runs | vs one process |",
        "|---|---:|---|---:|",
        f"| `classify`, one process, {a.workers} threads | {fmt(m_one)} | "
        f"{', '.join(fmt(x) for x in one)} | 1.00 |",
        f"| Ray, {a.workers} workers x 1 thread, steady | {fmt(m_steady)} | "
        f"{', '.join(fmt(x) for x in steady)} | {m_steady / m_one:.2f} |",
        f"| Ray, end to end (actor start-up and model load included) | {fmt(m_e2e)} | "
        f"{', '.join(fmt(x) for x in e2e)} | {m_e2e / m_one:.2f} |",
        "",
        f"Labels differing between the two, per run: {', '.join(str(d) for d in differ)} "
        f"of {len(rows):,}. Overhead of Ray at steady state: {100 * (1 - m_steady / m_one):.1f}%; "
        f"end to end {100 * (1 - m_e2e / m_one):.1f}% (a fixed start-up per job, "
        f"{len(rows) / m_e2e - len(rows) / m_steady:.1f} s here, that a longer job amortizes).",
        "",
        "Projection (arithmetic, not measured): rows/s = machines x workers per machine x rate "
        f"per worker. At this machine's steady rate per core, {fmt(m_steady)} / {a.workers} = "
        f"{fmt(per_core)} rows/s per 1-thread worker:",
        "",
        "| machines | cores each | workers | rows/s | 100 M rows take |",
        "|---:|---:|---:|---:|---:|",
    ]
    for machines in (1, 10, 100):
        for cores in (a.workers, 16):
            w = machines * cores
            rate = w * per_core
            hours = 1e8 / rate / 3600
            took = f"{hours:.1f} h" if hours >= 1 else f"{hours * 60:.0f} min"
            lines.append(f"| {machines} | {cores} | {w} | {fmt(rate)} | {took} |")
    lines += [
        "",
        "It assumes what a cluster must provide for it to hold: input read and output written by "
        "the cluster's own CPUs and storage in parallel (label_dataset's default leaves one CPU per "
        "machine for that), batches large enough that Ray's per-task cost stays small "
        "(here a batch is ~0.5 s of work), and no shared bottleneck such as one file server.",
        "",
        "At a GPU's rate (not measured on this machine): with `num_gpus=1/k`, k workers share "
        "a GPU and rows/s per GPU = min(r_gpu, k x r_side), where r_gpu is classify's rows/s "
        "on that GPU for this model and these rows (a classify run with "
        "`sentiment_config('device','cuda')`, or `make gpu-check`) and r_side a worker's rate "
        "outside the encoder, one CPU each: this script with `--model "
        "tests/fixtures/models/bert_tiny` less that model's encoder time "
        "(bench/bench_cpu_side.sh); bench/RESULTS.md has both and the arithmetic.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    with open(os.path.join(HERE, "out", time.strftime("ray-%Y%m%d-%H%M%S.md")), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
