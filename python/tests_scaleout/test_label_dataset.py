"""label_dataset on a local Ray cluster of 2 workers: Parquet and CSV inputs,
every row labelled exactly once with classify's labels, malformed rows
reported with their ids, and a worker killed in the middle of a job."""

import os
import time

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import sqlite_sentiment.ray as sr
from conftest import assert_same_labels


def write_parquet(rows, directory, files):
    os.makedirs(directory)
    per = (len(rows) + files - 1) // files
    for k in range(files):
        part = rows[k * per:(k + 1) * per]
        pq.write_table(pa.table({"id": [r[0] for r in part], "text": [r[1] for r in part],
                                 "source": [r[2] for r in part], "gold": [r[3] for r in part]}),
                       os.path.join(directory, f"part-{k:02d}.parquet"))


def as_labels(out_rows):
    return {r["id"]: (r["label"], r["score"]) for r in out_rows}


def test_parquet_every_row_once_same_labels_as_classify(ray_cluster, corpus, reference, tmp_path):
    import ray.data
    write_parquet(corpus, str(tmp_path / "in"), files=8)
    # Both workers take one of the cluster's 2 CPUs, so the files are read
    # first (a pool holding every CPU would wait for its input); the write
    # runs as the pool finishes.
    ds = ray.data.read_parquet(str(tmp_path / "in")).repartition(8).materialize()
    t0 = time.monotonic()
    sr.label_dataset(ds, column="text", num_workers=2).write_parquet(str(tmp_path / "out"))
    seconds = time.monotonic() - t0
    out = pq.read_table(str(tmp_path / "out")).to_pylist()
    print(f"labelled {len(out)} rows through Ray in {seconds:.1f} s ({len(out) / seconds:.0f} rows/s)")
    ids = [r["id"] for r in out]
    assert len(ids) == len(corpus) and len(set(ids)) == len(corpus)
    # Every input column is kept, unchanged.
    by_id = {r[0]: r for r in corpus}
    assert set(out[0]) == {"id", "text", "source", "gold", *sr.OUTPUT_COLUMNS}
    assert all((r["text"], r["source"], r["gold"]) == by_id[r["id"]][1:] for r in out)
    worst = assert_same_labels(as_labels(out), reference, "Ray vs classify in one process")
    print(f"largest score difference: {worst:.2e}")
    assert all(r["error"] is None for r in out)
    # probs is a struct (one float64 per label), not JSON text.
    probs_type = pq.read_schema(str(tmp_path / "out" / os.listdir(tmp_path / "out")[0])
                                ).field("probs").type
    assert pa.types.is_struct(probs_type), probs_type
    assert [(f.name, f.type) for f in probs_type] == [("negative", pa.float64()),
                                                      ("positive", pa.float64())]
    assert all(r["probs"]["positive"] == pytest.approx(r["score"], abs=1e-5) for r in out)


def test_csv_input(ray_cluster, corpus, reference, tmp_path):
    import ray.data
    rows = corpus[:3000]
    path = str(tmp_path / "reviews.csv")
    pacsv.write_csv(pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows]}), path)
    # Default workers: (2 CPUs - 1) / 1 thread = 1, so the read streams in.
    out = sr.label_dataset(ray.data.read_csv(path), column="text", batch_size=256).take_all()
    assert sorted(r["id"] for r in out) == [r[0] for r in rows]
    assert_same_labels(as_labels(out), {r[0]: reference[r[0]] for r in rows}, "CSV")


def test_malformed_rows_reported_with_their_ids(ray_cluster):
    import ray.data
    good = "房间很干净，服务也很周到"
    values = {1: good, 2: None, 3: "", 4: "   ", 5: b"\xe6\x88\xbf\xff\xfe", 6: good.encode(),
              7: 42, 8: "\ud800 lone surrogate", 9: "等了两个小时才送到，饭菜全凉了"}
    # A column of mixed Python values (Ray keeps them as Python objects).
    ds = ray.data.from_items([{"id": i, "text": v} for i, v in values.items()])
    out = {r["id"]: r for r in sr.label_dataset(ds, column="text", batch_size=4).take_all()}
    assert sorted(out) == sorted(values)
    want_error = {2: "text is NULL", 3: "text is blank", 4: "text is blank",
                  5: "invalid UTF-8 at byte 3", 7: "text is int, not a string",
                  8: "invalid UTF-8: unpaired surrogate at character 0"}
    for i, r in out.items():
        assert r["error"] == want_error.get(i), (i, r)
        assert (r["label"] is None) == (i in want_error), (i, r)
    assert out[1]["label"] == out[6]["label"] == "positive"      # bytes that are UTF-8: text
    assert out[9]["label"] == "negative"


def test_whole_column_of_wrong_type(ray_cluster):
    import ray.data
    ds = ray.data.from_arrow(pa.table({"id": [1, 2], "text": [3.5, None]}))
    out = sorted(sr.label_dataset(ds, column="text").take_all(), key=lambda r: r["id"])
    assert [r["error"] for r in out] == ["text is float, not a string", "text is NULL"]


def test_output_column_clash_and_prefix(ray_cluster):
    import ray.data
    ds = ray.data.from_arrow(pa.table({"id": [1], "text": ["房间很干净"], "label": [1]}))
    # Without prefix=: pred_, said on stderr; no column twice.
    (row,) = sr.label_dataset(ds, column="text").take_all()
    assert row["label"] == 1 and row["pred_label"] == "positive" and row["pred_error"] is None
    assert row["pred_probs"]["positive"] == pytest.approx(row["pred_score"], abs=1e-5)
    (row,) = sr.label_dataset(ds, column="text", prefix="p_").take_all()
    assert row["label"] == 1 and row["p_label"] == "positive"
    with pytest.raises(Exception, match="already has column.*prefix="):
        sr.label_dataset(ds, column="text", prefix="").take_all()


def test_missing_columns_named(ray_cluster):
    import ray.data
    ds = ray.data.from_arrow(pa.table({"key": [1], "body": ["房间很干净"]}))
    with pytest.raises(Exception, match="no text column 'text'"):
        sr.label_dataset(ds, column="text", id_column="key").take_all()
    with pytest.raises(Exception, match="no id column 'id'"):
        sr.label_dataset(ds, column="body").take_all()
    (row,) = sr.label_dataset(ds, column="body", id_column=None).take_all()
    assert row["label"] == "positive"


def test_worker_killed_mid_job_every_row_exactly_once(ray_cluster, corpus, reference, tmp_path):
    import ray.data
    rows = corpus[:8000]
    flag = str(tmp_path / "kill-flag")
    open(flag, "w").close()
    # 4 blocks of 2,000 rows, 500 rows a batch: the kill lands inside a
    # block whose first batches were already handed back.
    ds = ray.data.from_arrow(pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows]})
                             ).repartition(4).materialize()
    from killers import KillOnceLabeller
    out = sr.label_dataset(ds, column="text", batch_size=500, num_workers=2,
                           labeller_cls=KillOnceLabeller,
                           labeller_kwargs={"kill_flag": flag, "kill_at": 3}).take_all()
    # A worker did die: it claimed the flag, and its process is gone.
    assert not os.path.exists(flag) and os.path.exists(flag + ".taken")
    pid = int(open(flag + ".taken").read())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    ids = [r["id"] for r in out]
    assert len(ids) == len(rows), f"{len(ids)} output rows for {len(rows)} input rows"
    assert len(set(ids)) == len(rows), f"{len(ids) - len(set(ids))} rows twice"
    assert_same_labels(as_labels(out), {r[0]: reference[r[0]] for r in rows}, "after a kill")


def test_workers_per_gpu(monkeypatch):
    """The pool's size on a cluster with GPUs, from what Ray reports of its
    nodes (faked here: no GPU is needed to count): one worker per GPU with
    num_gpus=1, several sharing each GPU with a fraction (a worker's CPU side
    caps its rate, bench/RESULTS.md), dead nodes not counted."""
    import ray
    nodes = [{"Alive": True, "Resources": {"CPU": 64.0, "GPU": 8.0}},
             {"Alive": True, "Resources": {"CPU": 32.0, "GPU": 4.0}},
             {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}},
             {"Alive": True, "Resources": {"CPU": 16.0}}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    workers, kw = sr._pool_args(None, 1, 1, None)
    assert (workers, kw["num_gpus"], kw["num_cpus"]) == (12, 1, 1)
    workers, kw = sr._pool_args(None, 1, 0.25, None)
    assert (workers, kw["num_gpus"]) == (48, 0.25)
    workers, _ = sr._pool_args(3, 1, 0.25, None)
    assert workers == 3
    # CPU workers leave one CPU a node for reading: (64-1) + (32-1) + (16-1)
    workers, kw = sr._pool_args(None, 1, 0, None)
    assert workers == 109 and "num_gpus" not in kw
    monkeypatch.setattr(ray, "nodes", lambda: [nodes[3]])
    with pytest.raises(RuntimeError, match="no GPU"):
        sr._pool_args(None, 1, 0.5, None)


def test_gpu_option(ray_cluster):
    import ray.data
    ds = ray.data.from_arrow(pa.table({"id": [1], "text": ["房间很干净"]}))
    if ray_cluster.cluster_resources().get("GPU", 0) == 0:
        # No GPU in the cluster: said at once, before any worker starts.
        with pytest.raises(RuntimeError, match="no GPU"):
            sr.label_dataset(ds, column="text", num_gpus=1)
        # The setting a GPU worker makes is the engine's: without CUDA it is
        # the engine's error, not a silent fall-back to the CPU.
        with pytest.raises(Exception, match="cuda"):
            sr.Labeller("text", use_gpu=True)
        pytest.skip("no GPU in this Ray cluster: one worker per GPU not run")
    (row,) = sr.label_dataset(ds, column="text", num_gpus=1).take_all()
    assert row["label"] == "positive"


def test_engine_in_one_process_matches_classify(corpus, reference):
    # The building block without Ray.
    rows = corpus[:500]
    eng = sr.Engine(threads=1)
    try:
        label, score, probs, trunc, error = eng.label([r[1] for r in rows])
    finally:
        eng.close()
    assert_same_labels({r[0]: (l, s) for r, l, s in zip(rows, label, score)},
                       {r[0]: reference[r[0]] for r in rows}, "Engine")
