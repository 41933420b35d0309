"""``compact()`` / ``mpcommit compact`` end to end on real S3 servers (moto and LocalStack): every format,
a dry run, crashes then recovery, and bad input. Rows are read back with independent readers."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mpcommit import recover
from mpcommit.compaction import standalone
from mpcommit.compaction.standalone import BinStatus, Outcome, compact
from mpcommit.errors import CommitStateUnknownError
from mpcommit.protocol import faults
from mpcommit.sizing import MIN_PART_SIZE
from tests.support.checks import all_keys, pending_uploads, read_object, visible_keys

from .test_formats import csv_of, lines_of, parquet_of

REPO = Path(__file__).resolve().parents[2]
BIG = MIN_PART_SIZE + 4096


def put(backend, bucket: str, key: str, data: bytes) -> None:
    backend.client.put_object(Bucket=bucket, Key=key, Body=data)


def json_ids_under(backend, bucket: str, prefix: str) -> list[str]:
    ids = []
    for key in visible_keys(backend.client, bucket, prefix):
        if not key.endswith((".json", ".json.gz")):
            continue
        data = read_object(backend.client, bucket, key)
        if key.endswith(".gz"):
            data = gzip.decompress(data)
        ids += [json.loads(line)["id"] for line in data.splitlines() if line.strip()]
    return sorted(ids)


def parquet_ids_under(backend, bucket: str, prefix: str) -> list[int]:
    ids: list[int] = []
    for key in visible_keys(backend.client, bucket, prefix):
        ids += pq.read_table(pa.BufferReader(read_object(backend.client, bucket, key))).column("id").to_pylist()
    return sorted(ids)


def assert_clean(backend, bucket: str, prefix: str = "t") -> None:
    """No pending upload and no job records left."""
    assert pending_uploads(backend.client, bucket, prefix) == []
    assert not [k for k in all_keys(backend.client, bucket, prefix) if "/_temporary/" in k]


def json_dataset(backend, bucket: str) -> dict[str, bytes]:
    """dt=1: small files and a big one (merged); dt=2: one file (left alone); dt=3: big files (left alone)."""
    files = {
        "t/dt=1/a.json": lines_of("1a", 2000),
        "t/dt=1/b.json": lines_of("1b", BIG, seed=1),
        "t/dt=1/c.json": lines_of("1c", 30_000, seed=2).rstrip(b"\n"),
        "t/dt=1/d.json": lines_of("1d", 100, seed=3),
        "t/dt=2/a.json": lines_of("2a", 500, seed=4),
        "t/dt=3/a.json": lines_of("3a", BIG, seed=5),
        "t/dt=3/b.json": lines_of("3b", BIG, seed=6),
        "t/_SUCCESS": b"{}",
        "t/notes.md": b"not data",
    }
    for k, v in files.items():
        put(backend, bucket, k, v)
    return files


def test_json_partitions_merged_in_place(backend, bucket) -> None:
    files = json_dataset(backend, bucket)
    before = json_ids_under(backend, bucket, "t")
    report = compact(f"s3://{bucket}/t", s3=backend.options, small_file_avg="5MB")
    assert report.outcome is Outcome.COMMITTED
    (b,) = report.bins
    assert b.partition == "dt=1" and b.status is BinStatus.MERGED and len(b.sources) == 4
    assert json_ids_under(backend, bucket, "t") == before
    keys = visible_keys(backend.client, bucket, "t")
    assert keys == {b.output, "t/dt=2/a.json", "t/dt=3/a.json", "t/dt=3/b.json", "t/notes.md"}
    assert b.output.startswith(f"t/dt=1/part-00000-{report.job_id}.c000.json")
    assert report.files_ignored == 1  # notes.md
    assert report.stats["copied"] == len(files["t/dt=1/b.json"]) and report.stats["fetched"] < 40_000
    assert_clean(backend, bucket)
    # a second run finds nothing to do
    again = compact(f"s3://{bucket}/t", s3=backend.options, small_file_avg="5MB")
    assert again.outcome is Outcome.NOTHING_TO_DO and visible_keys(backend.client, bucket, "t") == keys


def test_dry_run_changes_nothing(backend, bucket) -> None:
    json_dataset(backend, bucket)
    keys = all_keys(backend.client, bucket, "t")
    report = compact(f"s3://{bucket}/t", s3=backend.options, small_file_avg="5MB", dry_run=True)
    assert report.outcome is Outcome.DRY_RUN and [b.status for b in report.bins] == [BinStatus.PLANNED]
    assert report.to_json()["bins"][0]["files"] == 4
    assert all_keys(backend.client, bucket, "t") == keys
    assert pending_uploads(backend.client, bucket, "t") == []


def test_csv_with_header_text_gzip_and_parquet(backend, bucket) -> None:
    header = "id,text,n"
    put(backend, bucket, "c/x=1/a.csv", csv_of(header, "a", 300))
    put(backend, bucket, "c/x=1/b.csv", csv_of(header, "b", BIG))
    put(backend, bucket, "c/x=1/c.csv", csv_of(header, "c", 900))
    r = compact(f"s3://{bucket}/c", s3=backend.options, format="csv-header")
    (merged,) = visible_keys(backend.client, bucket, "c")
    rows = read_object(backend.client, bucket, merged).decode().splitlines()
    assert rows[0] == header and rows.count(header) == 1
    assert len(rows) == sum(len(csv_of(header, p, n).splitlines()) - 1 for p, n in (("a", 300), ("b", BIG), ("c", 900))) + 1
    assert r.bins[0].strategy == "concat"

    for i in range(4):
        put(backend, bucket, f"g/{i}.json.gz", gzip.compress(lines_of(f"g{i}", 3000, seed=i).rstrip(b"\n")))
    before = json_ids_under(backend, bucket, "g")
    compact(f"s3://{bucket}/g", s3=backend.options)
    assert len(visible_keys(backend.client, bucket, "g")) == 1 and json_ids_under(backend, bucket, "g") == before

    put(backend, bucket, "p/big.parquet", parquet_of(0, 400_000))
    for i in range(3):
        put(backend, bucket, f"p/s{i}.parquet", parquet_of(1_000_000 + i * 100, 100))
    put(backend, bucket, "q/a.snappy.parquet", parquet_of(0, 50, compression="snappy"))
    put(backend, bucket, "q/b.snappy.parquet", parquet_of(50, 50, compression="snappy"))
    before_p = parquet_ids_under(backend, bucket, "p")
    rp = compact(f"s3://{bucket}/p", s3=backend.options)
    rq = compact(f"s3://{bucket}/q", s3=backend.options)
    assert rp.bins[0].strategy == "concat" and rq.bins[0].strategy == "rewrite"
    assert parquet_ids_under(backend, bucket, "p") == before_p and rp.bins[0].rows == len(before_p)
    assert parquet_ids_under(backend, bucket, "q") == list(range(100))
    (q,) = visible_keys(backend.client, bucket, "q")
    assert q.endswith(".snappy.parquet")
    for prefix in "cgpq":
        assert_clean(backend, bucket, prefix)


# ------------------------------------------------------------------ crashes
def test_crash_after_the_first_complete_then_recover(backend, bucket) -> None:
    for p in range(3):
        for i in range(3):
            put(backend, bucket, f"t/p={p}/{i}.json", lines_of(f"{p}-{i}", 1000 + i, seed=p * 10 + i))
    before = json_ids_under(backend, bucket, "t")
    with faults.installed(faults.fail_at("commit.after_complete", 1)):
        with pytest.raises(CommitStateUnknownError):
            compact(f"s3://{bucket}/t", s3=backend.options)
    # some merged file may already be visible next to its sources: recover must finish the job
    actions = recover(f"s3://{bucket}/t", s3=backend.options)
    assert [a.action for a in actions] == ["finished"]
    assert json_ids_under(backend, bucket, "t") == before, "every row exactly once"
    assert len(visible_keys(backend.client, bucket, "t")) == 3
    assert_clean(backend, bucket)


def test_crash_in_the_middle_of_deleting_sources_then_recover(backend, bucket) -> None:
    for i in range(4):
        put(backend, bucket, f"t/{i}.json", lines_of(f"x{i}", 700, seed=i))
    before = json_ids_under(backend, bucket, "t")
    with faults.installed(faults.fail_at("commit.before_delete_batch", 1)):
        with pytest.raises(CommitStateUnknownError):
            compact(f"s3://{bucket}/t", s3=backend.options)
    assert len(visible_keys(backend.client, bucket, "t")) == 5  # merged file and its sources, until recovered
    recover(f"s3://{bucket}/t", s3=backend.options)
    assert json_ids_under(backend, bucket, "t") == before and len(visible_keys(backend.client, bucket, "t")) == 1
    assert_clean(backend, bucket)


def test_killed_process_then_recover(backend, bucket) -> None:
    """SIGKILL right after the first merged file is completed, in a separate process."""
    for p in range(2):
        for i in range(3):
            put(backend, bucket, f"t/p={p}/{i}.json", lines_of(f"{p}-{i}", 800, seed=p * 10 + i))
    before = json_ids_under(backend, bucket, "t")
    code = (
        "import sys; from mpcommit import S3Options; from mpcommit.compaction import compact\n"
        f"compact('s3://{bucket}/t', s3=S3Options(endpoint_url={backend.endpoint_url!r}, region='us-east-1', "
        "access_key_id='test', secret_access_key='test'))\n"
    )
    env = dict(os.environ, MPCOMMIT_FAULT="commit.after_complete:1:kill", PYTHONPATH=str(REPO / "src"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    actions = recover(f"s3://{bucket}/t", s3=backend.options)
    assert [a.action for a in actions] == ["finished"]
    assert json_ids_under(backend, bucket, "t") == before
    assert len(visible_keys(backend.client, bucket, "t")) == 2
    assert_clean(backend, bucket)


def test_failure_before_the_journal_rolls_back(backend, bucket, monkeypatch) -> None:
    for i in range(3):
        put(backend, bucket, f"t/{i}.json", lines_of(f"x{i}", 700, seed=i))
    keys = all_keys(backend.client, bucket, "t")

    def broken(*args, **kwargs):
        raise RuntimeError("driver bug")

    monkeypatch.setattr(standalone, "record_uploads", broken)
    with pytest.raises(RuntimeError, match="driver bug"):
        compact(f"s3://{bucket}/t", s3=backend.options)
    assert all_keys(backend.client, bucket, "t") == keys
    assert_clean(backend, bucket)


# ------------------------------------------------------------------ bad input
def test_mixed_schemas_and_unreadable_files_skip_their_bin_only(backend, bucket) -> None:
    put(backend, bucket, "t/k=mixed/a.parquet", parquet_of(0, 10))
    put(backend, bucket, "t/k=mixed/b.parquet", parquet_of(10, 10, schema_variant=1))
    put(backend, bucket, "t/k=bad/a.parquet", parquet_of(20, 10))
    put(backend, bucket, "t/k=bad/b.parquet", b"PAR1garbagePAR1")
    put(backend, bucket, "t/k=ok/a.parquet", parquet_of(30, 10))
    put(backend, bucket, "t/k=ok/b.parquet", parquet_of(40, 10))
    report = compact(f"s3://{bucket}/t", s3=backend.options)
    status = {b.partition: b for b in report.bins}
    assert status["k=ok"].status is BinStatus.MERGED
    assert status["k=mixed"].status is BinStatus.SKIPPED and "schema" in status["k=mixed"].message
    assert status["k=bad"].status is BinStatus.SKIPPED and "k=bad/b.parquet" in status["k=bad"].message
    for part in ("k=mixed", "k=bad"):
        assert len(visible_keys(backend.client, bucket, f"t/{part}")) == 2
    assert parquet_ids_under(backend, bucket, "t/k=ok") == list(range(30, 50))
    assert_clean(backend, bucket)


def test_every_bin_skipped_rolls_the_job_back(backend, bucket) -> None:
    put(backend, bucket, "t/a.parquet", parquet_of(0, 10))
    put(backend, bucket, "t/b.parquet", parquet_of(10, 10, schema_variant=1))
    keys = all_keys(backend.client, bucket, "t")
    report = compact(f"s3://{bucket}/t", s3=backend.options)
    assert report.outcome is Outcome.NOTHING_MERGED
    assert all_keys(backend.client, bucket, "t") == keys
    assert_clean(backend, bucket)


@pytest.mark.parametrize("when", ["before", "after"])
def test_source_deleted_mid_compaction(backend, bucket, monkeypatch, when: str) -> None:
    """A source deleted while its bin is merged (before: the merge's reads fail; after: the check before the
    commit sees it): the bin is skipped, the deleted rows do not come back, the other sources stay."""
    for i in range(3):
        put(backend, bucket, f"t/a/{i}.json", lines_of(f"a{i}", 600, seed=i))
        put(backend, bucket, f"t/b/{i}.json", lines_of(f"b{i}", 600, seed=10 + i))
    put(backend, bucket, "t/a/big.json", lines_of("abig", BIG, seed=99))
    real = standalone.run_merge

    def deleting(store, bkt, task, **kwargs):
        if "t/a/1.json" in task.sources and when == "before":
            backend.client.delete_object(Bucket=bucket, Key="t/a/1.json")
        pending = real(store, bkt, task, **kwargs)
        if "t/a/1.json" in task.sources and when == "after":
            backend.client.delete_object(Bucket=bucket, Key="t/a/1.json")
        return pending

    monkeypatch.setattr(standalone, "run_merge", deleting)
    report = compact(f"s3://{bucket}/t", s3=backend.options)
    status = {b.partition: b for b in report.bins}
    assert status["a"].status is BinStatus.SKIPPED and "t/a/1.json" in status["a"].message
    assert "changed or was deleted" in status["a"].message
    assert status["b"].status is BinStatus.MERGED
    assert visible_keys(backend.client, bucket, "t/a") == {"t/a/0.json", "t/a/2.json", "t/a/big.json"}
    assert not [i for i in json_ids_under(backend, bucket, "t") if i.startswith("a1-")]
    assert_clean(backend, bucket)


# ------------------------------------------------------------------ the CLI
def cli(backend, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, COLUMNS="200",
               PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, "-m", "mpcommit.cli.main", "--endpoint-url", backend.endpoint_url, *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.ci_on("localstack")
def test_cli(backend, bucket) -> None:
    json_dataset(backend, bucket)
    dry = cli(backend, "compact", f"s3://{bucket}/t", "--small-file-avg", "5MB", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert doc["outcome"] == "dry_run" and doc["binsPlanned"] == 1 and doc["bins"][0]["files"] == 4
    table = cli(backend, "compact", f"s3://{bucket}/t", "--small-file-avg", "5MB", "--dry-run")
    assert table.returncode == 0 and "dt=1" in table.stdout and "Dry run" in table.stdout
    done = cli(backend, "compact", f"s3://{bucket}/t", "--small-file-avg", "5MB", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["binsMerged"] == 1
    assert cli(backend, "compact", f"s3://{bucket}/t", "--target-size", "lots").returncode == 2
    assert cli(backend, "compact", "not-a-uri").returncode == 2
    put(backend, bucket, "m/a.parquet", parquet_of(0, 10))
    put(backend, bucket, "m/b.parquet", parquet_of(10, 10, schema_variant=1))
    mixed = cli(backend, "compact", f"s3://{bucket}/m")
    assert mixed.returncode == 1 and "schema" in mixed.stderr and "Traceback" not in mixed.stderr


def test_cli_progress_in_a_log_the_summary_the_predicted_refusal_and_the_reason_for_nothing(moto_backend) -> None:
    backend = moto_backend
    bucket = backend.new_bucket()
    json_dataset(backend, bucket)
    # stderr is a pipe here, as under cron: progress comes as plain lines, the table can be left out.
    done = cli(backend, "compact", f"s3://{bucket}/t", "--small-file-avg", "5MB", "--summary")
    assert done.returncode == 0, done.stderr
    progress = done.stderr.splitlines()
    for line in ("mpcommit: listing files: 8/8", "mpcommit: planning bins: 1/1", "mpcommit: merging bins: 1/1",
                 "mpcommit: deleting merged sources: 4/4"):
        assert line in progress, done.stderr
    assert done.stdout.startswith("Job ") and "merged files replaced 4 files" in done.stdout, done.stdout
    assert "dt=1" not in done.stdout and len(done.stdout.strip().splitlines()) == 1, "the totals only"

    # Average under the threshold, but the files too big to pair within the target: said so, not "no average under".
    nothing = cli(backend, "compact", f"s3://{bucket}/t", "--small-file-avg", "100MB", "--target-size", "6MB")
    assert nothing.returncode == 0, nothing.stderr
    assert "no two of their files fit together within the target size of 6,000,000 bytes" in nothing.stdout
    assert "raise the target size" in nothing.stdout and "average file is under" not in nothing.stdout
    big = cli(backend, "compact", f"s3://{bucket}/t", "--small-file-avg", "1kB", "--json")
    assert json.loads(big.stdout)["reason"].startswith("no partition's average file is under the small-file")

    # CSV files that all start with the same line: the real run refuses to guess, and the dry run says so first.
    for name in "abc":
        put(backend, bucket, f"c/{name}.csv", b"id,name\n" + f"{name},1\n".encode())
    dry = cli(backend, "compact", f"s3://{bucket}/c", "--dry-run")
    assert dry.returncode == 1, dry
    assert "would not be merged" in dry.stderr and "a header or data?" in dry.stderr, dry.stderr
    assert "1 of 1 bins would be skipped by the real run" in dry.stderr
    assert "Dry run: 0 merged files would replace 0 files" in dry.stdout and "would be skipped" in dry.stdout
    real = cli(backend, "compact", f"s3://{bucket}/c")
    assert real.returncode == 1 and "a header or data?" in real.stderr
    assert visible_keys(backend.client, bucket, "c") == {"c/a.csv", "c/b.csv", "c/c.csv"}


def test_request_counts(backend, bucket) -> None:
    """Six small files in one partition cost exactly this: one listing to plan, one of the journals (files of a
    job that is committing are left alone) and one to check the sources again before the commit (not a HEAD
    each), one GET per source, one part, the job's bookkeeping and its place in the table's commit order."""
    for i in range(6):
        put(backend, bucket, f"t/dt=1/{i}.json", lines_of(str(i), 1000, seed=i))
    from mpcommit.store.conditional import conditional_writes
    from mpcommit.store.s3 import store_for

    conditional_writes(store_for(backend.options), bucket, "t/")  # probed once per bucket and process, not counted
    report = compact(f"s3://{bucket}/t", s3=backend.options)
    assert report.requests == {
        # plan, its jobs' records, re-check sources, the commit's loser-manifest scan and cleanup; the commit
        # order before the listing, after it (jobs in flight), and to take a place; and the bucket's root, for a
        # table that t would lie inside (protocol/nesting.py)
        "list_objects_v2": 9,
        # job descriptor, heartbeat, manifest, place, journal, the finishing turn, _SUCCESS, the place's end; and
        # two beats of the heartbeat as fences: when the turn is taken, and before the sources are deleted
        "head_bucket": 1, "put_object": 10,
        # one GET per source, and _SUCCESS before it is replaced
        "create_multipart_upload": 1, "get_object": 7, "upload_part": 1, "complete_multipart_upload": 1,
        "head_object": 7,  # the descriptor after the journal is claimed, the ETag check before each source goes
        "delete_objects": 3, "list_multipart_uploads": 1,
    }


def test_request_counts_of_many_sources_in_one_partition(backend, bucket) -> None:
    """40 small files in one partition: the commit's check of its sources is one listing of the partition's
    children (one more than for six files, the same for 40 or 1,500), not a HEAD per source."""
    for i in range(40):
        put(backend, bucket, f"t/dt=1/{i:02d}.json", lines_of(str(i), 200, seed=i))
    put(backend, bucket, "t/dt=2/a.json", lines_of("other", 200))
    from mpcommit.store.conditional import conditional_writes
    from mpcommit.store.s3 import store_for

    conditional_writes(store_for(backend.options), bucket, "t/")  # probed once per bucket and process, not counted
    report = compact(f"s3://{bucket}/t", s3=backend.options)
    assert [len(b.sources) for b in report.merged] == [40]
    assert report.requests["head_object"] == 1, report.requests  # the job descriptor after the journal is claimed
    assert report.requests["list_objects_v2"] == 9 + 1, report.requests  # test_request_counts' 9, and the check
    assert visible_keys(backend.client, bucket, "t/dt=1") == {report.merged[0].output}
