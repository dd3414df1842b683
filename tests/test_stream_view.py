"""The materialized view (``hop.stream.view``): Spark compacts a continuous job's checkpoint deltas into Parquet.

The tests write delta files as a stream reducer does (tmp + rename), compact them, and read the base back with Spark
SQL (the suite's SparkSession, ``spark`` in conftest, which also runs the in-process compactions), comparing with what
plain Python computes from the same deltas: the later delta of a partition wins, a rewritten delta wins over the base.
The :class:`Compactor` tests go through ``python -m hop.stream.compactor`` child processes.

Skipped when Java or PySpark is missing (the engine itself needs neither).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from hop.stream.compactor import Compactor
from hop.stream.view import DeltaError, ViewInfo, compact, main, pending_deltas, view_info
from tests.conftest import interrupted_as_spark_starts, needs_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


pytestmark = needs_spark

Row = dict[str, Any]


def canonical(key: Any) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def write_delta(out: Path, partition: int, seq: int, rows: list[Row]) -> Path:
    """A delta file as a stream reducer writes it: one JSON object a line, renamed into place complete."""
    folder = out / "_checkpoints" / "deltas"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"delta-{partition:05d}-{seq:08d}.jsonl"
    temporary = path.with_name(path.name + ".tmp-1")
    text = "".join(json.dumps({**row, "partition": partition}) + "\n" for row in rows)
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    return path


def window_rows(rng: random.Random, windows: list[int], keys: list[Any]) -> list[Row]:
    rows = []
    for start in windows:
        for key in rng.sample(keys, k=len(keys) // 2):
            value: Any = rng.choice([rng.randint(-50, 1000), round(rng.uniform(0, 100), 3), "n/a", [1, 2], None])
            rows.append({"window_start": start * 10, "window_end": start * 10 + 10, "key": key, "value": value})
    return rows


KEYS: list[Any] = [f"w{i}" for i in range(12)] + [7, 2.5, ["a", 1], {"b": 1, "a": [2, None]}, None, True]


class Model:
    """The view computed in plain Python: per (window_start, partition, key) the row with the highest (sequence
    number, compaction round, line) wins, the rule the view documents."""

    def __init__(self) -> None:
        self.cells: dict[tuple[float, int, str], tuple[tuple[int, int, int], Row]] = {}
        self.round = 0

    def add(self, partition: int, seq: int, rows: list[Row]) -> None:
        for line, row in enumerate(rows):
            cell = (float(row["window_start"]), partition, canonical(row["key"]))
            rank = (seq, self.round, line)
            if cell not in self.cells or self.cells[cell][0] < rank:
                self.cells[cell] = (rank, row)

    def compacted(self) -> None:
        self.round += 1

    def sums(self) -> dict[float, tuple[float, int]]:
        """Per window_start: the sum of the numeric values and the number of rows."""
        result: dict[float, tuple[float, int]] = {}
        for (start, _, _), (_, row) in self.cells.items():
            value = row["value"]
            number = float(value) if type(value) in (int, float) else 0.0
            total, count = result.get(start, (0.0, 0))
            result[start] = (total + number, count + 1)
        return result


def view_sums(spark: SparkSession, info: ViewInfo) -> dict[float, tuple[float, int]]:
    spark.read.parquet(info.base).createOrReplaceTempView("view")
    rows = spark.sql(
        "SELECT window_start, COALESCE(SUM(value_num), 0) AS total, COUNT(*) AS n FROM view GROUP BY window_start"
    ).collect()
    return {row["window_start"]: (row["total"], row["n"]) for row in rows}


def assert_view_matches(spark: SparkSession, info: ViewInfo, model: Model) -> None:
    got, want = view_sums(spark, info), model.sums()
    assert sorted(got) == sorted(want)
    for start, (total, count) in want.items():
        assert got[start][1] == count, start
        assert got[start][0] == pytest.approx(total, rel=1e-9, abs=1e-9), start
    assert info.rows == len(model.cells)
    assert info.windows == len(want)
    table = spark.read.parquet(info.base)
    cells = {(r["window_start"], r["partition"], r["key"]): r for r in table.collect()}
    assert len(cells) == info.rows  # one row per (window_start, partition, key)
    for cell, (_, row) in model.cells.items():
        assert cells[cell]["value"] == canonical(row["value"])
        assert cells[cell]["window_end"] == float(row["window_end"])


def deltas_left(out: Path) -> list[str]:
    return sorted(path.name for path in (out / "_checkpoints" / "deltas").glob("delta-*.jsonl"))


def test_compaction_equals_python_sums(spark: SparkSession, tmp_path: Path) -> None:
    rng, model, out = random.Random(1), Model(), tmp_path / "out"
    for partition in range(3):
        rows = window_rows(rng, [0, 1, 2], KEYS)
        write_delta(out, partition, 0, rows)
        model.add(partition, 0, rows)
    correction = [{**row, "value": 10_000 + i} for i, row in enumerate(rows[:5])]  # partition 2 corrects 5 cells
    write_delta(out, 2, 1, correction)
    model.add(2, 1, correction)

    info = compact(out, spark=spark)
    assert info is not None and info.version == 1
    assert info.base == str(out.resolve() / "_view" / "base-000001")
    assert_view_matches(spark, info, model)
    table = spark.read.parquet(info.base)
    assert table.dtypes == [
        ("window_start", "double"),
        ("window_end", "double"),
        ("partition", "int"),
        ("key", "string"),
        ("value", "string"),
        ("value_num", "double"),
        ("seq", "bigint"),
    ]
    keys = {row["key"] for row in table.select("key").distinct().collect()}
    assert '{"a":[2,null],"b":1}' in keys and '["a",1]' in keys and "null" in keys
    nums = {(r["value"], r["value_num"]) for r in table.where("value IN ('\"n/a\"', 'null', 'true')").collect()}
    assert all(num is None for _, num in nums)

    manifest = json.loads((out / "_view" / "_manifest.json").read_text())
    assert manifest["version"] == 1 and manifest["base"] == info.base
    assert manifest["rows"] == info.rows and manifest["windows"] == info.windows == 3
    assert manifest["deltas"] == 4
    names = [f"delta-{p:05d}-00000000.jsonl" for p in range(3)] + ["delta-00002-00000001.jsonl"]
    assert sorted(manifest["last_deltas"]) == names
    assert manifest["compacted_at"] <= time.time()
    assert deltas_left(out) == [] and pending_deltas(out) == []
    assert view_info(out) == info
    assert compact(out, spark=spark) == info  # nothing new: nothing done
    assert sorted(p.name for p in (out / "_view").glob("base-*")) == ["base-000001"]


def test_second_compaction_merges_overrides_and_cleans_up(spark: SparkSession, tmp_path: Path) -> None:
    rng, model, out = random.Random(2), Model(), tmp_path / "out"
    assert compact(out, spark=spark) is None and view_info(out) is None
    first = {partition: window_rows(rng, [0, 1], KEYS) for partition in range(2)}
    for partition, rows in first.items():
        write_delta(out, partition, 3, rows)
        model.add(partition, 3, rows)
    assert compact(out, spark=spark) is not None
    model.compacted()

    # New deltas: a new window, a later delta of partition 0 correcting a cell of window 0, a delta of partition 1
    # numbered lower than the one compacted (it loses where they overlap), and partition 1's delta 3 rewritten by a
    # retried reducer (a new file under a compacted name: it wins over the base).
    target = first[0][0]
    later = [{**target, "value": -12345}] + window_rows(rng, [2], KEYS)
    late = [{**row, "value": 999_999} for row in first[1][:3]]
    rewritten = [{**first[1][-1], "value": 4242}]
    for partition, seq, rows in [(0, 4, later), (1, 1, late), (1, 3, rewritten)]:
        write_delta(out, partition, seq, rows)
        model.add(partition, seq, rows)
    assert sorted(pending_deltas(out)) == deltas_left(out)
    info = compact(out, spark=spark)
    model.compacted()
    assert info is not None and info.version == 2 and info.windows == 3
    assert_view_matches(spark, info, model)
    table = spark.read.parquet(info.base)
    corrected = table.where(f"window_start = 0 AND partition = 0 AND key = '{canonical(target['key'])}'").collect()
    assert [(row["value"], row["value_num"], row["seq"]) for row in corrected] == [("-12345", -12345.0, 4)]
    assert deltas_left(out) == []
    assert sorted(p.name for p in (out / "_view").glob("base-*")) == ["base-000001", "base-000002"]

    # A third compaction drops base-000001; a delta file it read that comes back unchanged (a crash between its
    # manifest and its deletes) is recognised and deleted, unread.
    rows = window_rows(rng, [3], KEYS)
    path = write_delta(out, 0, 5, rows)
    model.add(0, 5, rows)
    os.link(path, tmp_path / "kept")
    third = compact(out, spark=spark)
    model.compacted()
    assert third is not None and third.version == 3
    assert_view_matches(spark, third, model)
    assert sorted(p.name for p in (out / "_view").glob("base-*")) == ["base-000002", "base-000003"]
    os.replace(tmp_path / "kept", path)
    assert pending_deltas(out) == []
    assert compact(out, spark=spark) == third
    assert deltas_left(out) == []
    manifest = json.loads((out / "_view" / "_manifest.json").read_text())
    assert manifest["deltas"] == 6  # delta-00001-00000003 was compacted twice, once rewritten: it counts twice


def test_an_output_moved_elsewhere_names_and_compacts_its_own_view(spark: SparkSession, tmp_path: Path) -> None:
    """The manifest names its base by the absolute path ``OUT`` had as it was written: ``hop view`` of an output
    moved since (``mv out archive/``) printed the old place, gone, and its next compaction failed reading the old
    place's files (Spark's "PATH_NOT_FOUND")."""
    rng, model, out = random.Random(7), Model(), tmp_path / "out"
    rows = window_rows(rng, [0, 1], KEYS)
    write_delta(out, 0, 0, rows)
    model.add(0, 0, rows)
    assert compact(out, spark=spark) is not None
    model.compacted()
    moved = tmp_path / "archive" / "out"
    moved.parent.mkdir()
    os.rename(out, moved)
    info = view_info(moved)
    assert info is not None and info.base == str(moved.resolve() / "_view" / "base-000001")
    rows = window_rows(rng, [1, 2], KEYS)  # (window 1's piece is rewritten, from the moved base)
    write_delta(moved, 0, 1, rows)
    model.add(0, 1, rows)
    info = compact(moved, spark=spark)
    assert info is not None and info.version == 2 and info.base == str(moved.resolve() / "_view" / "base-000002")
    assert_view_matches(spark, info, model)


def test_the_manifest_does_not_grow_with_the_deltas_compacted(spark: SparkSession, tmp_path: Path) -> None:
    # A job running for days writes a delta per reducer every few seconds: the manifest, rewritten at every
    # compaction, listed every name compacted so far and grew by a megabyte a day.
    rng, out = random.Random(5), tmp_path / "out"
    manifest = out / "_view" / "_manifest.json"
    write_delta(out, 0, 0, window_rows(rng, [0], KEYS))
    assert compact(out, spark=spark) is not None
    first = len(manifest.read_bytes())
    for seq in range(1, 301):  # a burst of deltas compacted at once (the job ran while the compactor was down)
        write_delta(out, seq % 2, seq, window_rows(rng, [seq], KEYS[:2]))
    assert compact(out, spark=spark) is not None
    write_delta(out, 0, 301, window_rows(rng, [301], KEYS[:2]))
    info = compact(out, spark=spark)
    assert info is not None and info.version == 3 and info.windows == 302
    record = json.loads(manifest.read_text())
    assert record["deltas"] == 302 and list(record["last_deltas"]) == ["delta-00000-00000301.jsonl"]
    # It lists the base's pieces (3 here: one per compaction, none merged yet), not the deltas.
    assert info.pieces == len(record["pieces"]) == 3
    piece_bytes = max(len(json.dumps(piece, indent=1)) for piece in record["pieces"]) + 8
    assert len(manifest.read_bytes()) < first + 100 + 2 * piece_bytes  # (the counts have more digits)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"window_start": 10, "window_end": 20, "partition": 1, "key": "a"', "Expecting"),
        ('{"window_start": 10, "window_end": 20, "partition": 1, "key": "a"}', "expected an object with"),
        ('{"window_start": "10", "window_end": 20, "partition": 1, "key": "a", "value": 1}', "finite numbers"),
        ('{"window_start": 10, "window_end": 20, "partition": 0, "key": "a", "value": 1}', "not the file's partition"),
        ("[1, 2, 3]", "expected an object"),
    ],
)
def test_bad_delta_line_names_file_and_line(spark: SparkSession, tmp_path: Path, line: str, reason: str) -> None:
    out = tmp_path / "out"
    write_delta(out, 0, 0, [{"window_start": 0, "window_end": 10, "key": "a", "value": 1}])
    path = write_delta(out, 1, 0, [{"window_start": 10, "window_end": 20, "key": k, "value": 1} for k in "ab"])
    path.write_text(path.read_text() + "\n" + line + "\n")  # line 3 is blank (skipped), line 4 is bad
    with pytest.raises(DeltaError, match=f"{path}.* line 4: .*{reason}"):
        compact(out, spark=spark)
    assert view_info(out) is None and len(deltas_left(out)) == 2  # nothing changed
    assert not list((out / "_view").glob("*base-*"))


def test_nan_and_infinite_values_are_kept_and_later_compactions_still_run(spark: SparkSession, tmp_path: Path) -> None:
    # A job's reduce may well produce NaN (0/0 in a mean) or an infinity: the part files hold them as NaN/Infinity,
    # and so must the view; once every compaction failed on such a delta and the view stopped for good.
    out = tmp_path / "out"
    odd = [float("nan"), float("inf"), float("-inf")]
    write_delta(
        out, 0, 0, [{"window_start": 0, "window_end": 10, "key": f"k{i}", "value": v} for i, v in enumerate(odd)]
    )
    write_delta(out, 0, 1, [{"window_start": 10, "window_end": 20, "key": float("nan"), "value": [float("inf")]}])
    info = compact(out, spark=spark)
    assert info is not None and info.rows == 4 and deltas_left(out) == []
    rows = {(r["window_start"], r["key"]): r for r in spark.read.parquet(info.base).collect()}
    assert [rows[(0.0, f'"k{i}"')]["value"] for i in range(3)] == ["NaN", "Infinity", "-Infinity"]
    numbers = [rows[(0.0, f'"k{i}"')]["value_num"] for i in range(3)]
    assert numbers[0] != numbers[0] and numbers[1:] == [float("inf"), float("-inf")]
    assert rows[(10.0, "NaN")]["value"] == "[Infinity]" and rows[(10.0, "NaN")]["value_num"] is None
    write_delta(out, 1, 0, [{"window_start": 0, "window_end": 10, "key": "k9", "value": 1}])
    later = compact(out, spark=spark)
    assert later is not None and later.version == 2 and later.rows == 5


def test_compactor_in_background_ends_with_every_delta(spark: SparkSession, tmp_path: Path) -> None:
    """Compactions while the job writes deltas run in one child, kept between them (one JVM start, not one per
    compaction); a child idle past ``keep_alive`` is closed, and the last compaction at ``stop`` starts a new one."""
    rng, model, out = random.Random(3), Model(), tmp_path / "out"
    children_before = {child.pid for child in psutil.Process().children(recursive=True)}
    compactor = Compactor(out, interval=0.3, keep_alive=3.0)
    compactor.start()
    seq = 0

    def write_window(window: int, correct_window_0: bool = False) -> None:
        nonlocal seq
        for partition in range(2):
            rows = window_rows(rng, [window], KEYS)
            if correct_window_0 and partition:  # partition 1 corrects a row of window 0, compacted before
                rows.append({**model_row(model, 0, 1), "value": 31337})
            write_delta(out, partition, seq, rows)
            model.add(partition, seq, rows)
        seq += 1

    def wait_until(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 120  # with stop(): under pytest-timeout (300 s)
        while not condition() and compactor.failures == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert condition(), compactor.last_error

    try:
        for window in range(3):  # the job checkpoints while the compactor runs
            write_window(window)
            time.sleep(0.2)
        wait_until(lambda: compactor.compactions >= 1)
        model.compacted()
        write_window(3, correct_window_0=True)
        # Compacted by the child kept from the first compaction (counted once its answer came: the manifest, which
        # pending_deltas reads, is written just before).
        wait_until(lambda: compactor.compactions >= 2 and not pending_deltas(out))
        assert compactor.children_started == 1
        wait_until(lambda: not compactor.child_running)  # idle for keep_alive: closed
        write_window(4)
    finally:
        info = compactor.stop(final=True, timeout=150)
    assert compactor.failures == 0 and compactor.last_error is None
    assert compactor.children_started == 2 and compactor.last_seconds is not None and not compactor.child_running
    assert info is not None and info == view_info(out) and info.windows == 5
    assert pending_deltas(out) == [] and deltas_left(out) == []
    assert_view_matches(spark, info, model)
    # Zombies have exited: the session adopts orphans (conftest), so spark-submit's exited shell can show as one.
    left = [
        child
        for child in psutil.Process().children(recursive=True)
        if child.pid not in children_before and _running(child)
    ]
    assert left == []


def _command_line(process: psutil.Process) -> list[str] | str:
    try:
        return process.cmdline()
    except psutil.Error as error:
        return repr(error)


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def model_row(model: Model, window: int, partition: int) -> Row:
    """A row of ``model`` in the given window and partition (the first in key order)."""
    cells = sorted(cell for cell in model.cells if cell[0] == window * 10 and cell[1] == partition)
    return model.cells[cells[0]][1]


STAND_IN_CHILD = """
import json, pathlib, sys
deltas = pathlib.Path(sys.argv[1]) / "_checkpoints" / "deltas"
for line in sys.stdin:
    for delta in deltas.glob("delta-*.jsonl"):
        delta.unlink()
    print(json.dumps({"ok": True}), flush=True)
"""
"""A compaction child that takes every delta at once (deletes it) and says so, in place of Spark's: what is tested is
when the compactor asks, not what a compaction does."""


def test_the_compactor_asks_for_one_compaction_an_interval_while_deltas_keep_coming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compactor asked for the next compaction as soon as one ended whenever a delta had come meanwhile: a job
    checkpointing every second ran them in bursts (view versions 1 to 7 within 5 s at --view-interval 20s), each
    rewriting the whole base. It asks at most once an interval."""
    import subprocess
    import sys

    from hop.stream import compactor as module

    script = tmp_path / "stand_in_child.py"
    script.write_text(STAND_IN_CHILD, encoding="utf-8")

    def start(cls: type[Any], out: Path, spark_master: str, identity: Any = None) -> Any:
        process = subprocess.Popen(
            [sys.executable, str(script), str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        return cls(process, tempfile.TemporaryFile(), tempfile.mkdtemp(prefix="hop-compaction-", dir=tmp_path))

    monkeypatch.setattr(module._Child, "start", classmethod(start))
    out = tmp_path / "out"
    compactor = Compactor(out, interval=1.0)
    compactor.start()
    began = time.monotonic()
    try:
        seq = 0
        while time.monotonic() - began < 3.5:  # a delta every 0.1 s, as a busy job's checkpoints
            write_delta(out, 0, seq, [{"window_start": seq, "window_end": seq + 1, "key": "k", "value": 1}])
            seq += 1
            time.sleep(0.1)
        asked = compactor.compactions
    finally:
        compactor.stop(final=False, timeout=30)
    assert compactor.failures == 0, compactor.last_error
    assert 2 <= asked <= 4, f"{asked} compactions in 3.5 s at a 1 s interval"


def test_compactor_reports_the_child_error_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["show", str(out)]) == 1
    path = write_delta(out, 0, 0, [{"window_start": 0, "window_end": 10, "key": "a", "value": 1}])
    path.write_text(path.read_text() + "oops\n")
    compactor = Compactor(out, interval=60)
    assert compactor.stop(final=True, timeout=240) is None  # never started: stop runs the final compaction only
    assert compactor.failures == 1 and compactor.compactions == 0
    assert compactor.last_error is not None and f"{path} line 2: " in compactor.last_error, compactor.last_error
    assert deltas_left(out) == [path.name]
    manifest = {"version": 4, "base": str(out / "_view" / "base-000004"), "deltas": [], "rows": 9, "windows": 2}
    (out / "_view" / "_manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}/_view/base-000004: version 4, 9 rows, 2 windows\n"


def test_a_second_ctrl_c_ends_the_last_compaction_with_its_jvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the last compaction runs (``hop run`` stopping a continuous job) gives it up: its process group,
    JVM included, is ended (it went on for half a minute in a session of its own); the deltas stay for later.

    Only this test's own processes and temporary files are looked at (other tests may run beside it): the session
    adopts orphans (conftest), so a JVM left behind shows as a new descendant, and the temporary folder the
    compactor gives its child is made in a folder of the test's own."""
    import signal
    import threading

    out = tmp_path / "out"
    write_delta(out, 0, 0, [{"window_start": 0, "window_end": 10, "key": "a", "value": 1}])
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # where the compactor makes the child's TMPDIR
    descendants_before = {child.pid for child in psutil.Process().children(recursive=True)}
    compactor = Compactor(out, interval=60)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))  # while the child starts its JVM
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            compactor.stop(final=True, timeout=240)
    finally:
        timer.cancel()
    compacting = [
        child
        for child in psutil.Process().children(recursive=True)
        if child.pid not in descendants_before and _running(child)
    ]
    assert not compacting, [_command_line(child) for child in compacting]
    assert deltas_left(out) == ["delta-00000-00000000.jsonl"]
    # Killed while PySpark launched its JVM, the child left the directory launch_gateway makes for the JVM's
    # connection file (/tmp/tmpXXXXXXXX) behind: it now makes it in a directory of its own (hop-compaction-*),
    # removed at its end.
    assert os.listdir(temporary) == []


def test_a_compaction_child_whose_session_fails_ends_its_jvm_and_leaves_no_directory(tmp_path: Path) -> None:
    """A compaction child whose SparkSession failed to start once its JVM was up (here a setting the JVM's memory
    check refuses) answered the failure and exited, its JVM still running and that JVM's temporary directory
    (``hop-spark-tmp-*``) left in its TMPDIR. It now ends its JVM and removes the directory before it exits."""
    import subprocess
    import sys

    from hop.stream.compactor import _group_running

    temporary, out = tmp_path / "tmp", tmp_path / "out"
    temporary.mkdir()
    write_delta(out, 0, 0, [{"window_start": 0, "window_end": 10, "key": "a", "value": 1}])
    environment = {**os.environ, "TMPDIR": str(temporary)}
    environment["PYSPARK_SUBMIT_ARGS"] = "--conf spark.testing.memory=1 pyspark-shell"  # (SparkContext refuses it)
    command = [sys.executable, "-m", "hop.stream.compactor", str(out)]
    child = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment,
        start_new_session=True,
    )  # fmt: skip
    try:
        replies, said = child.communicate(b"compact\n", timeout=120)
        reply = json.loads(replies)
        assert not reply["ok"] and "Spark did not start" in reply["error"], (reply, said.decode()[-2000:])
        assert child.returncode == 1
        assert not _group_running(child.pid), "the child's JVM outlived it"
        assert sorted(path.name for path in temporary.iterdir()) == [], "left in the temporary directory"
        assert deltas_left(out) == ["delta-00000-00000000.jsonl"] and view_info(out) is None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate(timeout=30)


def test_hop_view_of_a_run_without_view_says_so(tmp_path: Path) -> None:
    """``hop view OUT`` of a job run with ``--no-view`` said "no materialized view yet (no compaction has run)", as
    if one were coming; it now says the job ran with --no-view and where its windows are."""
    from tests.conftest import hop, job_path

    (tmp_path / "in.txt").write_text("a b\n")
    output = tmp_path / "out"
    run = hop("run", job_path("stream_wordcount"), "--source", "replay:in.txt", "--window", "1r", "-o", str(output),
              "--workers", "1", "--no-view", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    view = hop("view", str(output), cwd=tmp_path)
    assert view.returncode == 1
    assert f"{output} has no materialized view: its job ran without one (--no-view, " in view.stderr, view.stderr
    assert f"its windows are in {output / 'windows'}" in view.stderr
    # One that wrote no window named its windows' folder all the same, which was not there.
    (tmp_path / "empty.txt").write_text("")
    empty = tmp_path / "empty"
    run = hop("run", job_path("stream_wordcount"), "--source", "replay:empty.txt", "--window", "1r", "-o", str(empty),
              "--workers", "1", "--no-view", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0 and "no window written" in run.stderr, run.stderr
    view = hop("view", str(empty), cwd=tmp_path)
    assert view.returncode == 1 and "(nor did it write a window)" in view.stderr, view.stderr
    assert str(empty / "windows") not in view.stderr, view.stderr


def test_a_continuous_run_without_java_says_at_its_start_that_it_makes_no_view(tmp_path: Path) -> None:
    """Without the Java Spark needs, a continuous job with its view (the default, as the README's examples run)
    said so only after it ended ("the materialized view was not updated: Java ..."), every compaction meanwhile
    failing; it now warns as it starts, naming --no-view and ``hop view OUT --compact``, and starts no compactor."""
    import subprocess
    import sys

    from tests.conftest import job_path

    (tmp_path / "in.txt").write_text("a b\n")
    output = tmp_path / "out"
    no_java = {**os.environ, "JAVA_HOME": str(tmp_path)}  # (no bin/java there)
    command = [sys.executable, "-m", "hop", "run", job_path("stream_wordcount"), "--source", "replay:in.txt",
               "--window", "1r", "-o", str(output), "--workers", "1"]  # fmt: skip
    run = subprocess.run(command, cwd=tmp_path, env=no_java, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    warning = (
        f"hop: warning: no materialized view will be made (JAVA_HOME is {tmp_path}, which holds no bin/java, and "
        "Spark runs the java there"
    )
    assert warning in run.stderr, run.stderr
    assert f"--no-view runs without one, and `hop view {output} --compact` makes it later" in run.stderr
    assert run.stderr.index(warning) < run.stderr.index("hop: window "), "said before the job's windows"
    assert "the materialized view was not updated" not in run.stderr, "no compaction was tried"
    assert (output / "windows").is_dir() and not (output / "_view").exists()


def test_a_continuous_run_whose_view_master_does_not_answer_says_so_at_its_start(tmp_path: Path) -> None:
    """A continuous job whose ``--spark-master spark://...`` takes no connection said so only after it ended ("the
    materialized view was not updated: the Spark master ... could not be reached"), every compaction of a job of days
    failing meanwhile in silence; it now warns as it starts (the job runs on: the master may be started later)."""
    import socket
    import subprocess
    import sys

    from tests.conftest import job_path

    with socket.socket() as probe:  # (a port nothing listens on: the connection is refused)
        probe.bind(("127.0.0.1", 0))
        master = f"spark://127.0.0.1:{probe.getsockname()[1]}"
    (tmp_path / "in.txt").write_text("a b\n")
    output = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "run", job_path("stream_wordcount"), "--source", "replay:in.txt",
               "--window", "1r", "-o", str(output), "--workers", "1", "--spark-master", master]  # fmt: skip
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    warning = "hop: warning: the materialized view is not updated while its master does not answer "
    warning += f"(the Spark master {master} could not be reached"
    assert warning in run.stderr, run.stderr
    assert run.stderr.index(warning) < run.stderr.index("hop: window "), "said before the job's windows"
    assert (output / "windows").is_dir()


def test_hop_view_of_a_batch_jobs_output_says_it_has_none(tmp_path: Path) -> None:
    """It said "no materialized view yet (no compaction has run)", as if one were coming; then it said so with exit
    code 1, which the README gives a failed job: a batch job's folder is the wrong one given, bad usage (2)."""
    from tests.conftest import hop, job_path

    (tmp_path / "in.txt").write_text("a b\n")
    output = tmp_path / "out"
    run = hop("run", job_path("wordcount"), "in.txt", "-o", str(output), "--workers", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    view = hop("view", str(output), cwd=tmp_path)
    assert view.returncode == 2, view.stderr
    assert f"{output} is a batch job's output: only a continuous job (hop run --source) keeps a" in view.stderr


def test_hop_view_of_a_folder_that_does_not_exist_says_so(tmp_path: Path) -> None:
    """``hop view OUT`` with a mistyped OUT said "OUT is not an output directory; give a job id with --coordinator",
    not that nothing is there, nor what to give instead of a job id; a file said the same."""
    from tests.conftest import hop

    view = hop("view", "no-such-out", cwd=tmp_path)
    assert view.returncode == 2, view.stderr
    assert "no-such-out does not exist: give a continuous job's output directory (its -o)" in view.stderr
    (tmp_path / "a-file").write_text("")
    view = hop("view", "a-file", cwd=tmp_path)
    assert view.returncode == 2 and "a-file is not a directory: give" in view.stderr, view.stderr


def test_ctrl_c_during_the_last_compaction_skips_it_and_the_run_still_succeeds(tmp_path: Path) -> None:
    """``hop run --source`` offers "Ctrl-C skips it" while the last compaction runs after the job ended; taking the
    offer ended the run with "error: interrupted while stopping" and exit code 130, though every window had been
    written. It now exits 0, says the view was not updated and how to update it, and leaves no compaction process."""
    import signal
    import subprocess
    import sys

    from tests.conftest import job_path

    (tmp_path / "in.txt").write_text("a b\nb c\n")
    output, log = tmp_path / "out", tmp_path / "stderr.txt"
    command = [sys.executable, "-m", "hop", "run", job_path("stream_wordcount"), "--source", "replay:in.txt"]
    command += ["--window", "1r", "-o", str(output), "--workers", "1", "--view-interval", "600"]
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, cwd=tmp_path, stderr=stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "updating the materialized view" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=60) == 0, log.read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    said = log.read_text()
    assert f"the materialized view was not updated: interrupted; `hop view {output} --compact`" in said, said
    assert "error" not in said, said
    # Among this test's own processes only: hop run has ended, so a compaction it left is an orphan the session
    # adopted (conftest), a descendant of this process.
    command_lines = [_command_line(child) for child in psutil.Process().children(recursive=True) if _running(child)]
    compacting = [
        line
        for line in command_lines
        if isinstance(line, list) and "hop.stream.compactor" in " ".join(line) and str(output) in " ".join(line)
    ]
    assert not compacting, compacting
    assert deltas_left(output), "the deltas stay for the next compaction"
    assert json.loads((output / "_job.json").read_text())["status"] == "succeeded"


def test_hop_view_names_pending_deltas_and_compacts_them(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "out"
    write_delta(out, 0, 0, [{"window_start": 0, "window_end": 10, "key": "a", "value": 1}])
    command = [sys.executable, "-m", "hop", "view", str(out)]
    before = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert before.returncode == 1, before.stderr
    assert f"no compaction has run; 1 checkpoint delta not in it yet: `hop view {out} --compact`" in before.stderr
    after = subprocess.run([*command, "--compact"], capture_output=True, text=True, timeout=300)
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == str(out / "_view" / "base-000001") and "1 row over 1 window;" in after.stderr
    assert "not in it yet" not in after.stderr and deltas_left(out) == []


def test_hop_view_refuses_a_spark_master_without_compact(tmp_path: Path) -> None:
    """``hop view OUT --spark-master URL`` took the master and ignored it (only ``--compact`` starts Spark), printing
    the view as if it had been used; it is refused as bad usage now, as hop refuses options that would do nothing."""
    import subprocess
    import sys

    out = tmp_path / "out"
    write_delta(out, 0, 0, [{"window_start": 0, "window_end": 10, "key": "a", "value": 1}])
    command = [sys.executable, "-m", "hop", "view", str(out), "--spark-master", "local[2]"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert run.stderr == (
        "hop: error: --spark-master local[2] applies to --compact, which starts Spark; this hop view only reads the "
        "view's manifest: add --compact, or drop --spark-master\n"
    )
    assert deltas_left(out) == ["delta-00000-00000000.jsonl"]


def test_hop_view_compact_where_spark_cannot_start_exits_3_as_hop_run_does(tmp_path: Path) -> None:
    """``hop view --compact`` with a JAVA_HOME holding no java exited 1, the code of a failed job, where ``hop run
    --engine spark`` exits 3 (the README's exit codes: the cluster or Spark could not run it)."""
    import subprocess
    import sys

    out = tmp_path / "out"
    write_delta(out, 0, 0, [{"window_start": 0, "window_end": 10, "key": "a", "value": 1}])
    environment = {**os.environ, "JAVA_HOME": str(tmp_path)}
    command = [sys.executable, "-m", "hop", "view", str(out), "--compact"]
    run = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)
    assert run.returncode == 3 and "hop: error: " in run.stderr, (run.returncode, run.stderr)
    assert str(tmp_path) in run.stderr, run.stderr
    assert deltas_left(out) == ["delta-00000-00000000.jsonl"] and view_info(out) is None


def test_ctrl_c_as_hop_view_compacts_starting_spark_leaves_no_jvm_directory(tmp_path: Path) -> None:
    """Ctrl-C once the JVM was up but its session still starting ended ``hop view --compact`` (exit 130) leaving the
    JVM's temporary directory, ``hop-spark-tmp-*``, in TMPDIR: no session, so nothing ended the JVM but the exit."""
    import sys

    temporary, out = tmp_path / "tmp", tmp_path / "out"
    temporary.mkdir()
    write_delta(out, 0, 0, [{"window_start": 0, "window_end": 10, "key": "a", "value": 1}])
    command = [sys.executable, "-m", "hop", "view", str(out), "--compact"]
    code, stderr = interrupted_as_spark_starts(command, env={**os.environ, "TMPDIR": str(temporary)})
    assert code == 130 and stderr.endswith("hop: error: interrupted\n"), (code, stderr)
    assert sorted(path.name for path in temporary.iterdir()) == [], "left in the temporary directory"
    assert deltas_left(out) == ["delta-00000-00000000.jsonl"] and view_info(out) is None


def test_sigterm_as_hop_view_compacts_prints_nothing_of_sparks_but_interrupted(tmp_path: Path) -> None:
    """``kill PID`` of ``hop view --compact`` while its Spark job wrote the new base: the session was stopped under
    the running job, which printed ``ERROR FileFormatWriter: Aborting job`` and a page of Java stack (or PySpark
    warned "Unable to cleanly shutdown Spark JVM process") above "interrupted". The job is now cancelled with Spark's
    logging off first; the run exits 143 saying "interrupted" alone, leaving its deltas and no JVM directory."""
    import subprocess
    import sys

    temporary, out = tmp_path / "tmp", tmp_path / "out"
    temporary.mkdir()
    for seq in range(40):  # (enough rows for the job to be running when the signal comes)
        bounds = {"window_start": seq * 10, "window_end": seq * 10 + 10}
        rows = [{**bounds, "key": f"k{k}", "value": k} for k in range(3000)]
        write_delta(out, 0, seq, rows)
    command = [sys.executable, "-m", "hop", "view", str(out), "--compact"]
    environment = {**os.environ, "TMPDIR": str(temporary)}
    with open(tmp_path / "stderr", "w+") as stderr:
        run = subprocess.Popen(command, env=environment, stderr=stderr, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not list((out / "_view").glob("_tmp-write-*")):  # (Spark's job has started writing the base)
                assert time.monotonic() < deadline and run.poll() is None, (tmp_path / "stderr").read_text()
                time.sleep(0.05)
            run.send_signal(signal.SIGTERM)
            assert run.wait(timeout=60) == 143
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    assert (tmp_path / "stderr").read_text() == "hop: error: interrupted\n"
    assert sorted(path.name for path in temporary.iterdir()) == [], "left in the temporary directory"
    assert len(deltas_left(out)) == 40 and view_info(out) is None


def base_files(info: ViewInfo) -> dict[str, tuple[int, int]]:
    """The Parquet files of a view's base: name -> (inode, mtime in ns)."""
    paths = [p for p in Path(info.base).iterdir() if p.suffix == ".parquet" and not p.name.startswith((".", "_"))]
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in paths}


def compact_windows(spark: SparkSession, out: Path, model: Model, windows: range, rng: random.Random) -> ViewInfo:
    """One compaction per window, each of a delta per partition (2) as a job checkpointing every window writes."""
    info = None
    for window in windows:
        for partition in range(2):
            rows = window_rows(rng, [window], KEYS)
            write_delta(out, partition, window, rows)
            model.add(partition, window, rows)
        info = compact(out, spark=spark)
        model.compacted()
    assert info is not None
    return info


def test_a_compaction_after_many_reads_and_rewrites_none_of_the_untouched_pieces(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Each compaction read the whole previous base and wrote it again whole, so a job's compactions grew slower
    with its age (43,200 windows a day at a 2 s slide). The base is now pieces by window_start range: a compaction of
    new windows writes a piece of its own and links the others unchanged. Shown here by the untouched pieces' files:
    the same inodes, unmodified, and not read at all (garbage in them does not fail the compaction)."""
    rng, model, out = random.Random(11), Model(), tmp_path / "out"
    info = compact_windows(spark, out, model, range(9), rng)
    assert info.version == 9 and info.windows == 9
    before = base_files(info)
    saved = {}
    for name in before:  # garbage over every byte, in place (same inode): a compaction that reads them fails
        path = Path(info.base) / name
        saved[name] = path.read_bytes()
        with open(path, "r+b") as file:
            file.write(b"\xff" * len(saved[name]))
    garbled = base_files(info)

    later = compact_windows(spark, out, model, range(9, 10), rng)
    assert later.version == 10
    after = base_files(later)
    assert {name: after[name] for name in garbled} == garbled  # the same files, not written since
    (added,) = set(after) - set(garbled)
    assert after[added][0] not in {inode for inode, _ in garbled.values()}
    assert info.pieces == len(before) == 3  # merged 4 by 4 as they came: windows 0-3, 4-7, and 8
    assert later.pieces == 4
    for name, data in saved.items():  # back as they were, for the check of the whole view
        with open(Path(later.base) / name, "r+b") as file:
            file.write(data)
    assert_view_matches(spark, later, model)
    assert view_info(out) == later


def windows_per_file(spark: SparkSession, info: ViewInfo) -> dict[str, set[float]]:
    return {
        name: {row[0] for row in spark.read.parquet(str(Path(info.base) / name)).select("window_start").collect()}
        for name in base_files(info)
    }


def test_a_late_delta_rewrites_the_old_piece_holding_its_window_and_wins(spark: SparkSession, tmp_path: Path) -> None:
    """A retried reducer rewrites deltas of windows compacted long ago (and a partition behind the others writes
    windows the others wrote before): per (window_start, partition, key) the higher-numbered delta still wins, in
    the piece that holds that window, which alone is rewritten; each window stays in one piece."""
    rng, model, out = random.Random(12), Model(), tmp_path / "out"
    info = compact_windows(spark, out, model, range(6), rng)
    before = base_files(info)
    old_piece = next(name for name, starts in windows_per_file(spark, info).items() if 10.0 in starts)

    late = [{**model_row(model, 1, 0), "value": 77_777}]
    late.append({"window_start": 0, "window_end": 10, "key": "new", "value": 5})
    write_delta(out, 0, 50, late)  # numbered past every delta: it wins
    model.add(0, 50, late)
    lower = [{**model_row(model, 2, 1), "value": -1}]
    write_delta(out, 1, 0, lower)  # a rewrite of partition 1's first delta, numbered below the one of window 2: loses
    model.add(1, 0, lower)
    later = compact(out, spark=spark)
    model.compacted()
    assert later is not None
    assert_view_matches(spark, later, model)
    cell = canonical(model_row(model, 1, 0)["key"])
    got = spark.read.parquet(later.base).where(f"window_start = 10 AND partition = 0 AND key = '{cell}'").collect()
    assert [(row["value"], row["seq"]) for row in got] == [("77777", 50)]
    after = base_files(later)
    assert old_piece not in after and len(set(after) - set(before)) == 1  # that piece alone was written again
    kept = {name: stamp for name, stamp in before.items() if name != old_piece}
    assert kept and {name: after.get(name) for name in kept} == kept  # the others are the same files
    assert info.pieces == later.pieces == 3  # windows 0-3, 4, 5
    spans = windows_per_file(spark, later)
    assert sorted(start for starts in spans.values() for start in starts) == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]


def test_a_delta_replaced_while_it_is_compacted_is_read_as_checked_then_again_by_the_next_compaction(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retried reducer replaced a delta (tmp + rename) after the compaction had checked its lines and planned the
    pieces, before Spark read it: Spark read the new lines, whose rows of an old window went to a piece the plan had
    only linked, and that version left them out (and held the new file's other rows under the old file's stamp).
    The compaction reads the delta as it checked it; the replacement is pending and the next compaction takes it."""
    from hop.stream import view as module

    rng, model, out = random.Random(14), Model(), tmp_path / "out"
    info = compact_windows(spark, out, model, range(5), rng)
    assert info.pieces == 2  # windows 0-3 and 4
    first = window_rows(rng, [6], KEYS)
    path = write_delta(out, 0, 60, first)
    model.add(0, 60, first)
    second = [{**row, "value": 1000 + n} for n, row in enumerate(window_rows(rng, [1, 6], KEYS))]
    real_plan = module.plan

    def plan_then_replace(*args: Any, **kwargs: Any) -> Any:
        planned = real_plan(*args, **kwargs)
        write_delta(out, 0, 60, second)  # the retried reducer's file, as Spark is about to read the delta
        return planned

    monkeypatch.setattr(module, "plan", plan_then_replace)
    during = compact(out, spark=spark)
    monkeypatch.undo()
    model.compacted()
    assert during is not None
    assert_view_matches(spark, during, model)  # the delta as checked, whole, and nothing of its replacement
    assert pending_deltas(out) == [path.name] and path.read_text().count("\n") == len(second)
    listing = sorted(p.name for p in (out / "_view").iterdir())
    assert listing == ["_lock", "_manifest.json", "base-000005", "base-000006"]  # no pinned delta left

    model.add(0, 60, second)
    later = compact(out, spark=spark)
    model.compacted()
    assert later is not None
    assert_view_matches(spark, later, model)  # window 1's rows too, in the piece of windows 0-3
    assert pending_deltas(out) == [] and deltas_left(out) == []


def test_a_crash_between_writing_pieces_and_the_manifest_leaves_the_old_view(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction killed after Spark wrote its pieces (and their base folder was made) but before the manifest was
    replaced: readers still see the previous view whole, every delta is still pending, and the next compaction does
    the same work again and ends where one without the crash would have."""
    from hop.stream import view as module

    rng, model, out = random.Random(13), Model(), tmp_path / "out"
    info = compact_windows(spark, out, model, range(3), rng)
    before = base_files(info)
    rows = window_rows(rng, [3], KEYS)  # makes 4 level-0 pieces: merged into one
    write_delta(out, 0, 3, rows)
    late = [{**model_row(model, 0, 1), "value": 123}]
    write_delta(out, 1, 3, late)

    class Crash(Exception):
        pass

    real_replace = os.replace

    def replace(source: Any, target: Any) -> None:
        if Path(target).name == "_manifest.json":
            raise Crash
        real_replace(source, target)

    monkeypatch.setattr(module.os, "replace", replace)
    with pytest.raises(Crash):
        compact(out, spark=spark)
    monkeypatch.undo()
    assert view_info(out) == info and base_files(info) == before
    assert sorted(pending_deltas(out)) == ["delta-00000-00000003.jsonl", "delta-00001-00000003.jsonl"]
    assert (out / "_view" / "base-000004").is_dir()  # the crashed run's, named by no manifest
    assert_view_matches(spark, info, model)

    model.add(0, 3, rows)
    model.add(1, 3, late)
    later = compact(out, spark=spark)
    model.compacted()
    assert later is not None and later.version == 4
    assert_view_matches(spark, later, model)
    listing = sorted(p.name for p in (out / "_view").iterdir())
    assert listing == ["_lock", "_manifest.json", "base-000003", "base-000004"]
    assert base_files(info) == before  # the previous base, for its readers
    assert pending_deltas(out) == [] and deltas_left(out) == []
    assert (info.pieces, later.pieces) == (3, 1)  # the 4 level-0 pieces merged into one


def test_a_delta_replaced_as_the_compaction_deletes_it_stays_for_the_next(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction deleted each delta it read by name once it had found its stamp unchanged: a retried reducer's
    replacement renamed onto that name in between was deleted unread, its rows never in the view. The delta is
    renamed aside first and its stamp checked there: the replacement stays, pending, and the next compaction has it."""
    from hop.stream import view as module

    rng, model, out = random.Random(16), Model(), tmp_path / "out"
    info = compact_windows(spark, out, model, range(2), rng)
    first = window_rows(rng, [2], KEYS)
    path = write_delta(out, 0, 70, first)
    model.add(0, 70, first)
    second = [{**row, "value": 5000 + n} for n, row in enumerate(window_rows(rng, [2], KEYS))]
    real_stamp = module._stamp

    def stamp_then_replace(target: Path) -> str | None:
        stamp = real_stamp(target)
        committed = json.loads((out / "_view" / "_manifest.json").read_text())["version"] > info.version
        if committed and target.name.startswith(path.name) and not replaced:
            replaced.append(write_delta(out, 0, 70, second))  # the retried reducer's file lands now
        return stamp

    replaced: list[Path] = []
    monkeypatch.setattr(module, "_stamp", stamp_then_replace)
    during = compact(out, spark=spark)
    monkeypatch.undo()
    model.compacted()
    assert during is not None and replaced
    assert_view_matches(spark, during, model)
    assert pending_deltas(out) == [path.name] and path.read_text().count("\n") == len(second)
    assert sorted(p.name for p in (out / "_checkpoints" / "deltas").iterdir()) == [path.name]

    model.add(0, 70, second)
    later = compact(out, spark=spark)
    model.compacted()
    assert later is not None
    assert_view_matches(spark, later, model)
    assert pending_deltas(out) == [] and deltas_left(out) == []


def test_deltas_a_crashed_compaction_renamed_aside_are_put_back(spark: SparkSession, tmp_path: Path) -> None:
    """A compaction killed between renaming a delta aside and deleting it: the next one gives the file its name back
    (read again if it is not the one the view holds, deleted again if it is)."""
    rng, model, out = random.Random(17), Model(), tmp_path / "out"
    compact_windows(spark, out, model, range(1), rng)
    rows = window_rows(rng, [1], KEYS)
    path = write_delta(out, 1, 5, rows)
    model.add(1, 5, rows)
    os.rename(path, path.with_name(path.name + ".deleting"))  # never compacted: it must not be lost
    later = compact(out, spark=spark)
    model.compacted()
    assert later is not None
    assert_view_matches(spark, later, model)
    assert sorted(p.name for p in (out / "_checkpoints" / "deltas").iterdir()) == []


def test_a_compaction_with_nothing_new_deletes_the_bases_a_crash_left(spark: SparkSession, tmp_path: Path) -> None:
    """A compaction that crashed after replacing the manifest, before deleting the older bases, left them; only a
    later compaction with rows deleted them, so one left at a job's end stayed for good. A compaction with nothing
    new deletes them too, keeping the view's base and the one before (its readers may still be on it)."""
    rng, model, out = random.Random(15), Model(), tmp_path / "out"
    info = compact_windows(spark, out, model, range(3), rng)
    view = out / "_view"
    stale = view / "base-000001"  # as the crash left it: version 3 is in the manifest, base-000001 not deleted
    stale.mkdir()
    (stale / "piece-00000001-000.parquet").write_bytes(b"PAR1")
    assert compact(out, spark=spark) == info
    assert sorted(p.name for p in view.iterdir()) == ["_lock", "_manifest.json", "base-000002", "base-000003"]
    assert_view_matches(spark, info, model)


def test_a_view_written_before_pieces_is_compacted_on(spark: SparkSession, tmp_path: Path) -> None:
    """A running job's view written before the base was pieces (one folder, a manifest without ``pieces``): the
    first compaction since rewrites it whole into a piece, once; the next ones leave that piece as it is."""
    rng, model, out = random.Random(14), Model(), tmp_path / "out"
    legacy = out / "_view" / "base-000007"
    rows = window_rows(rng, [0, 1], KEYS)
    model.add(0, 2, rows)
    model.compacted()
    table = [
        (float(r["window_start"]), float(r["window_end"]), 0, canonical(r["key"]), canonical(r["value"]),
         float(r["value"]) if type(r["value"]) in (int, float) else None, 2)
        for r in rows
    ]  # fmt: skip
    schema = "window_start double, window_end double, partition int, key string, value string, value_num double, "
    spark.createDataFrame(table, schema + "seq long").coalesce(2).write.parquet(str(legacy))
    manifest = {"version": 7, "base": str(legacy), "deltas": 3, "rows": len(rows), "windows": 2,
                "compacted_at": time.time(), "last_deltas": {}}  # fmt: skip
    (out / "_view" / "_manifest.json").write_text(json.dumps(manifest))
    assert view_info(out) == ViewInfo(7, str(legacy), len(rows), 2, 1)

    late = [{**rows[0], "value": 4242}]
    write_delta(out, 0, 3, late)
    model.add(0, 3, late)
    info = compact_windows(spark, out, model, range(2, 3), rng)
    assert info.version == 8 and info.pieces == 1  # the old base and the new rows, in one piece
    assert_view_matches(spark, info, model)
    (first,) = base_files(info).items()
    later = compact_windows(spark, out, model, range(3, 4), rng)
    assert later.version == 9 and later.pieces == 2 and base_files(later)[first[0]] == first[1]
    assert_view_matches(spark, later, model)
    assert json.loads((out / "_view" / "_manifest.json").read_text())["deltas"] == 3 + 1 + 2 + 2


NAN, INF = float("nan"), float("inf")
EVERY_KIND: list[Any] = ["a", "", "é😀", 'q"\t\n', 0, -1, 2**70, 1.0, -0.0, 1.5, 1e300, NAN, INF, -INF, True, False,
                         None, [], [1, ["a", None]], {}, {"b": 1, "a": {"c": [2]}}]  # fmt: skip


def assert_view_is_model(spark: SparkSession, out: Path, info: ViewInfo, model: Model) -> dict[Any, Any]:
    """Every column of every row of the base is the model's; the manifest's pieces are the base's files, each with
    the rows, windows and window_start range it says. Returns the rows read: cell -> (window_end, value, seq)."""
    from pyspark.sql import functions as F

    rows = spark.read.parquet(info.base).withColumn("file", F.input_file_name()).collect()
    cells = {(r["window_start"], r["partition"], r["key"]): r for r in rows}
    assert len(cells) == len(rows) == info.rows == len(model.cells)
    for cell, (rank, row) in model.cells.items():
        got, value = cells[cell], row["value"]
        number = float(value) if type(value) is float or (type(value) is int and abs(value) < 2**1024) else None
        assert (got["window_end"], got["value"], got["seq"]) == (float(row["window_end"]), canonical(value), rank[0])
        assert got["value_num"] == number or (
            number is not None and math.isnan(number) and math.isnan(got["value_num"])
        )
    manifest = json.loads((out / "_view" / "_manifest.json").read_text())
    assert view_info(out) == info and info.pieces == len(manifest["pieces"])
    assert info.windows == len({cell[0] for cell in cells})
    names = {f"piece-{p['id']:08d}-{n:03d}.parquet": p for p in manifest["pieces"] for n in range(p["files"])}
    assert sorted(os.listdir(info.base)) == sorted(names)
    for name, piece in names.items():
        starts = [cell[0] for cell, row in cells.items() if row["file"].endswith("/" + name)]
        assert (piece["rows"], piece["windows"]) == (len(starts), len(set(starts)))
        assert (piece["lo"], piece["hi"]) == (min(starts), max(starts))
    return {cell: (r["window_end"], r["value"], r["seq"]) for cell, r in cells.items()}


def test_random_deltas_crashes_at_each_step_and_the_previous_base_against_a_model(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compactions of random deltas, merged at several levels (small pieces): new windows, late rows numbered higher
    (they win) and lower (they lose), a delta rewritten under a compacted name (it wins over its old rows), a cell
    twice in a file (the later line wins), blank lines and a delta of blank lines only, keys and values of every
    JSON kind, NaN and infinities. Crashes come after the new base folder is renamed into place (before the
    manifest), after the manifest while old bases are deleted, and while the deltas read are deleted; each leaves a
    whole view and the next compaction ends as if none came. A reader of the previous base reads it unchanged."""
    from hop.stream import pieces

    monkeypatch.setattr(pieces, "PIECE_ROWS", 100)
    monkeypatch.setattr(pieces, "FAN_IN", 2)
    rng, model, out = random.Random(21), Model(), tmp_path / "out"

    def rows_of(windows: list[int]) -> list[Row]:
        rows = [{"window_start": w * 10, "window_end": w * 10 + rng.choice([10, 20]), "key": key,
                 "value": rng.choice([*EVERY_KIND, 2**1030, "n/a"])}
                for w in windows for key in rng.sample(EVERY_KIND, 4)]  # fmt: skip
        return [*rows, {**rows[0], "value": rng.random()}]  # the same cell again: this line wins

    def crash_when(name: str, test: Callable[[Path], bool], after: bool) -> None:
        owner = {"replace": os, "rmtree": shutil, "unlink": Path}[name]
        real = getattr(owner, name)

        def crashing(path: Any, *args: Any, **kwargs: Any) -> Any:
            target = Path(args[0] if name == "replace" else path)
            if not test(target):
                return real(path, *args, **kwargs)
            monkeypatch.setattr(owner, name, real)
            if after:
                real(path, *args, **kwargs)
            raise Crash(f"{name} {target.name}")

        monkeypatch.setattr(owner, name, crashing)

    class Crash(Exception):
        pass

    crashes = {
        1: ("replace", lambda path: path.name.startswith("base-"), True),  # the new base in place, no manifest yet
        2: ("rmtree", lambda path: path.name.startswith("base-") and path.exists(), False),  # an old base, after it
        3: ("unlink", lambda path: path.name.startswith("delta-"), True),  # a delta read, after the manifest
    }
    pending: list[tuple[int, int, list[Row]]] = []  # the deltas written since the last compaction

    def commit() -> None:
        for delta in pending:
            model.add(*delta)
        model.compacted()
        pending.clear()

    previous: tuple[ViewInfo, dict[Any, Any]] | None = None
    seqs = dict.fromkeys(range(3), 0)
    for step in range(5):
        for partition in range(3):  # the next window, from every partition
            write_delta(out, partition, seqs[partition], rows := rows_of([step]))
            pending.append((partition, seqs[partition], rows))
            seqs[partition] += 1
        if step >= 1:  # late rows of an old window, numbered past the others: they win
            write_delta(out, 1, seqs[1], rows := rows_of([rng.randrange(step)]))
            pending.append((1, seqs[1], rows))
            seqs[1] += 1
        if step >= 2:  # partition 2's first delta again, rewritten: it wins over its old rows, loses to later ones
            write_delta(out, 2, 0, rows := rows_of([0, rng.randrange(step)]))
            pending.append((2, 0, rows))
        if step == 3:  # a delta of blank lines only, and blank lines in another
            (out / "_checkpoints" / "deltas" / f"delta-00000-{seqs[0]:08d}.jsonl").write_text("\n  \n\t\r\n")
            seqs[0] += 1
            path = out / "_checkpoints" / "deltas" / f"delta-00000-{seqs[0] - 2:08d}.jsonl"
            path.write_text("\n" + path.read_text().replace("\n", "\n \n"))
        before = json.loads((out / "_view" / "_manifest.json").read_text()) if step else None
        if step in crashes:
            crash_when(*crashes[step])
            with pytest.raises(Crash):
                compact(out, spark=spark)
            manifest = json.loads((out / "_view" / "_manifest.json").read_text())
            committed = manifest["version"] != before["version"]
            assert committed == (step != 1)
            if not committed:  # a reader sees the old view whole (a committed one is checked below)
                crashed = view_info(out)
                assert crashed is not None
                assert_view_is_model(spark, out, crashed, model)
            else:
                commit()
        info = compact(out, spark=spark)
        commit()
        assert info is not None
        cells = assert_view_is_model(spark, out, info, model)
        bases = range(info.version - (1 if step else 0), info.version + 1)
        # (after the crash of step 2 no delta is new: that compaction deletes the old base the crash left)
        assert sorted(os.listdir(out / "_view")) == ["_lock", "_manifest.json", *(f"base-{v:06d}" for v in bases)]
        assert deltas_left(out) == [] and pending_deltas(out) == []
        if previous is not None:  # the previous base, as its reader saw it
            old = spark.read.parquet(previous[0].base).collect()
            assert {(r[0], r[2], r[3]): (r[1], r[4], r[6]) for r in old} == previous[1]
        previous = (info, cells)
    manifest = json.loads((out / "_view" / "_manifest.json").read_text())
    top = max(piece["level"] for piece in manifest["pieces"])
    full = sum(piece["rows"] >= 100 for piece in manifest["pieces"])
    assert top >= 2 and info.pieces <= 2 * full + top + 1


def test_hop_view_of_a_folder_no_continuous_job_wrote_says_so(tmp_path: Path) -> None:
    """``hop view OUT/windows`` (a folder inside a job's output, or any folder no continuous job wrote in) said "no
    materialized view yet (no compaction has run)", exit 1, as if one were coming; it now says the folder is no
    continuous job's output directory and what to give, exit 2 (bad usage)."""
    from tests.conftest import hop

    folder = tmp_path / "out" / "windows"
    (folder / "20261128T170040Z").mkdir(parents=True)
    view = hop("view", str(folder), cwd=tmp_path)
    assert view.returncode == 2, view.stderr
    assert f"{folder} is not a continuous job's output directory (it holds no windows/, _checkpoints/" in view.stderr
    assert "no compaction has run" not in view.stderr
