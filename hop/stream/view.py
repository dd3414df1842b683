"""The materialized view of a continuous job: Spark compacts its checkpoint deltas into a Parquet table.

Input, written by the job (tmp + rename): ``OUT/_checkpoints/deltas/delta-PPPPP-SSSSSSSS.jsonl`` (reducer partition,
its checkpoint sequence number), a line ``{"window_start": n, "window_end": n, "partition": int (the file's), "key":
any, "value": any}`` (blank lines skipped, other fields ignored). Per (window_start, partition, key) the higher
numbered delta wins, within one the later line. A reducer retried after a crash may rewrite a name it used before:
the rewritten file is a new delta (it wins over the base's rows of that number).

Output: ``OUT/_view/base-VVVVVV/`` (Parquet), a row per (window_start, partition, key): ``window_start`` double,
``window_end`` double, ``partition`` int, ``key`` string (compact JSON, sorted object keys), ``value`` string (same
JSON; NaN and infinities as ``NaN``, ``Infinity``, ``-Infinity``, as in the job's part files), ``value_num`` double
(the value if a number, NaN and infinities included, else null), ``seq`` long (its delta's number: a delta compacted
late but numbered lower still loses). ``OUT/_view/_manifest.json`` (replaced atomically; the commit point; readers
open its base, never a listing): ``version``, ``base`` (absolute), ``deltas`` (how many delta files were compacted
so far, a file rewritten under a compacted name counting again), ``rows``, ``windows`` (distinct window_start),
``compacted_at``, ``last_deltas`` (name -> inode:size:mtime, of the last compaction only). Its size does not grow with
the deltas compacted: a job runs for days, writing a delta per reducer every few seconds, and a list of their names
grew by a megabyte a day, every byte rewritten at every compaction.

:func:`compact` (one at a time per OUT, ``_view/_lock``) deletes the files of ``last_deltas`` still there unchanged
(a crash came between that manifest and its deletes), merges the base with every other delta in one Spark job,
writes the new base under a temporary name and renames it, replaces the manifest, then deletes the bases but the new
and the previous one (its readers are not cut off) and the deltas it read, unless rewritten since. The job never
deletes deltas; only compaction deletes bases. Idempotent: a crash before the manifest is replaced leaves the old
view and all deltas for the next run. With no new delta it starts no Spark and returns the current view (``None``
before the first). A bad delta line raises :class:`DeltaError` naming file and line, changing nothing. Executors
must see OUT (a local master, or a shared disk). CLI: ``python -m hop.stream.view compact|show OUT [--master M]``.

:class:`hop.stream.compactor.Compactor` runs compactions while a job runs, in a child process kept between them.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hop.outputs import OutputRemovedError, make_in_output, output_changed, output_removed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SPARK_CONF", "DeltaError", "ViewInfo", "compact", "main", "pending_deltas", "view_info"]

DELTAS_DIR = Path("_checkpoints", "deltas")
VIEW_DIR = "_view"
MANIFEST = "_manifest.json"
_DELTA_NAME = re.compile(r"^delta-(\d{5,})-(\d{8,})\.jsonl$")
_BASE_NAME = re.compile(r"^base-\d{6,}$")
_MARKED = "<<hop-delta-error {} hop-delta-error>>"  # Spark ships only the text of an executor's traceback
_MARK = re.compile(r"<<hop-delta-error (.*?) hop-delta-error>>", re.S)
_ERROR = "hop.stream.view: error: "
_COLUMNS = ("window_start", "window_end", "partition", "key", "value", "value_num", "seq")
_SCHEMA = "window_start double, window_end double, partition int, key string, value string, value_num double, "
_SCHEMA += "seq long, src long, line long"  # src: 0 for a base row, 1 for a delta row; line: in its delta
_FIELDS = ("window_start", "window_end", "partition", "key", "value")
SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    # A compaction is a short job on small data: the JIT's first tier and the serial collector start fastest.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode
"""NaN and infinities are written as the job's part files write them (``NaN``, ``Infinity``, ``-Infinity``)."""
PathLike = str | os.PathLike[str]


class DeltaError(ValueError):
    """A delta file holds a line that is not a valid window result; the message names the file and line."""


@dataclass(frozen=True)
class ViewInfo:
    """The committed view: its version, the absolute path of its Parquet base, its rows and distinct windows."""

    version: int
    base: str
    rows: int
    windows: int


class _Delta(NamedTuple):
    name: str
    partition: int
    seq: int
    stamp: str  # inode:size:mtime_ns: a rewrite (tmp + rename) changes it


def _manifest(out: Path) -> dict[str, Any] | None:
    with contextlib.suppress(FileNotFoundError):
        return dict(json.loads((out / VIEW_DIR / MANIFEST).read_text(encoding="utf-8")))
    return None


def _compacted(manifest: dict[str, Any] | None) -> int:
    """The delta files compacted so far (a manifest written before ``deltas`` was a count lists their names)."""
    if manifest is None:
        return 0
    deltas = manifest.get("deltas", 0)
    return len(deltas) if isinstance(deltas, list) else int(deltas)


def _info(manifest: dict[str, Any]) -> ViewInfo:
    return ViewInfo(int(manifest["version"]), str(manifest["base"]), int(manifest["rows"]), int(manifest["windows"]))


def view_info(out_dir: PathLike) -> ViewInfo | None:
    """The view as the manifest of ``out_dir`` describes it; ``None`` when nothing was compacted yet."""
    return None if (manifest := _manifest(Path(out_dir))) is None else _info(manifest)


def _stamp(path: Path) -> str | None:
    with contextlib.suppress(FileNotFoundError):
        stat = path.stat()
        return f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"
    return None


def _deltas(out: Path, manifest: dict[str, Any] | None) -> tuple[list[_Delta], list[_Delta]]:
    """The delta files of ``out`` in name order: (new ones, ones the last compaction read and left behind)."""
    read = manifest.get("last_deltas", {}) if manifest else {}
    new, old = list[_Delta](), list[_Delta]()
    for name in sorted(os.listdir(out / DELTAS_DIR)) if (out / DELTAS_DIR).is_dir() else []:
        match, stamp = _DELTA_NAME.match(name), _stamp(out / DELTAS_DIR / name)
        if match and stamp:
            (old if read.get(name) == stamp else new).append(_Delta(name, int(match[1]), int(match[2]), stamp))
    return new, old


def pending_deltas(out_dir: PathLike) -> list[str]:
    """Names of the delta files of ``out_dir`` that the view does not hold yet."""
    out = Path(out_dir)
    return [delta.name for delta in _deltas(out, _manifest(out))[0]]


def _row(partition: int, seq: int, number: int, raw: bytes) -> tuple[Any, ...]:
    text = raw.decode("utf-8")
    record = json.loads(text)  # NaN and Infinity parse: kept in key and value, refused as bounds below
    if not isinstance(record, dict) or not all(name in record for name in _FIELDS):
        raise ValueError(f"expected an object with {', '.join(_FIELDS)}, got {text.strip()[:80]}")
    start, end, part, key, value = (record[name] for name in _FIELDS)
    if not all(type(bound) in (int, float) and math.isfinite(bound) for bound in (start, end)):
        raise ValueError(f"window_start and window_end must be finite numbers, got {start!r}, {end!r}")
    if type(part) is not int or part != partition:
        raise ValueError(f"partition {part!r} is not the file's partition {partition}")
    # A float is stored as it is, NaN and infinities too (Parquet doubles hold them); an int too large for a double
    # has no number column.
    big = type(value) is int and abs(value) > sys.float_info.max
    number_value = float(value) if type(value) in (int, float) and not big else None
    return float(start), float(end), partition, _encode(key), _encode(value), number_value, seq, 1, number


def _parse_delta(item: tuple[str, int, int]) -> Iterator[tuple[Any, ...]]:
    path, partition, seq = item
    with open(path, "rb") as file:
        for number, raw in enumerate(file, 1):
            try:
                if raw.strip():
                    yield _row(partition, seq, number, raw)
            except ValueError as error:  # UnicodeDecodeError and JSONDecodeError included
                raise DeltaError(_MARKED.format(f"{path} line {number}: {error}")) from None


def compact(
    out_dir: PathLike,
    spark_master: str = "local[1]",
    *,
    spark: SparkSession | Callable[[], SparkSession] | None = None,
    identity: tuple[int, int] | None = None,
) -> ViewInfo | None:
    """Merge the new deltas of ``out_dir`` into a new base (module docstring). Runs on ``spark`` if given (left
    running): a session, or a function giving one, called only once the new deltas have been checked (so nothing
    new, or a bad line, costs no JVM start). Else on a session started on ``spark_master`` and stopped at the end,
    its JVM with it. An ``out_dir`` that is not there has nothing to compact (None), and is not made. ``identity``
    (``hop.outputs.output_identity``, a running job's ``OUT`` as it started): another directory under its name is
    not the job's, and raises :class:`~hop.outputs.OutputRemovedError` with nothing made or read there."""
    out = Path(out_dir).resolve()
    view = out / VIEW_DIR
    if identity is not None and output_changed(out, identity):
        raise OutputRemovedError(output_removed(out))
    try:
        make_in_output(out, view)
    except FileNotFoundError:
        return None  # no output (removed since its deltas were found): nothing to compact, and it is not made again
    with open(view / "_lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the file closes
        except BlockingIOError:
            raise RuntimeError(f"another compaction of {out} is running") from None
        manifest = _manifest(out)
        new, left = _deltas(out, manifest)
        for delta in left:
            (out / DELTAS_DIR / delta.name).unlink(missing_ok=True)
        if not new:
            return None if manifest is None else _info(manifest)
        for delta in new:  # checked here, before a JVM starts: a bad line fails at once, naming file and line
            try:
                for _ in _parse_delta((str(out / DELTAS_DIR / delta.name), delta.partition, delta.seq)):
                    pass
            except DeltaError as error:
                marked = _MARK.search(str(error))
                raise DeltaError(marked.group(1) if marked else str(error)) from None
        version = (manifest["version"] if manifest else 0) + 1
        base, temporary = view / f"base-{version:06d}", view / f"_tmp-base-{version:06d}"
        from hop.spark_engine import shutdown_jvm, start_session  # not at the top: executors import this module

        if spark is None:
            session = start_session(spark_master, "hop view compaction", quiet=True, conf=SPARK_CONF)
        else:
            session = spark() if callable(spark) else spark
        try:
            shutil.rmtree(temporary, ignore_errors=True)  # left by a run that was killed
            items = [(str(out / DELTAS_DIR / d.name), d.partition, d.seq) for d in new]
            rows, windows = _merge(session, items, manifest["base"] if manifest else None, temporary)
            shutil.rmtree(base, ignore_errors=True)  # left by a run that crashed before its manifest
            os.replace(temporary, base)
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
            if spark is None:
                session.stop()
                shutdown_jvm()
        compacted = _compacted(manifest) + len(new)
        record: dict[str, Any] = dict(version=version, base=str(base), deltas=compacted, rows=rows, windows=windows)
        record.update(compacted_at=time.time(), last_deltas={d.name: d.stamp for d in new})
        (view / f"{MANIFEST}.tmp").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        os.replace(view / f"{MANIFEST}.tmp", view / MANIFEST)
        keep = {base.name, Path(manifest["base"]).name if manifest else base.name}
        for entry in view.iterdir():
            if _BASE_NAME.match(entry.name) and entry.name not in keep:
                shutil.rmtree(entry, ignore_errors=True)
        for path, stamp in ((out / DELTAS_DIR / delta.name, delta.stamp) for delta in new):
            if _stamp(path) == stamp:
                path.unlink(missing_ok=True)
        return _info(record)


def _merge(spark: SparkSession, items: list[tuple[str, int, int]], previous: str | None, target: Path) -> list[int]:
    """Write the winners among the previous base and the deltas to ``target``; return its rows and windows."""
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    parsed = sc.parallelize(items, min(len(items), 4 * sc.defaultParallelism)).flatMap(_parse_delta)
    rows = spark.createDataFrame(parsed, _SCHEMA)
    if previous is not None:  # a base row loses to a delta row of the same sequence number (a rewritten delta)
        zero = F.lit(0).cast("long")
        rows = rows.unionByName(spark.read.parquet(previous).select(*_COLUMNS, zero.alias("src"), zero.alias("line")))
    winner = F.max_by(F.struct("window_end", "value", "value_num", "seq"), F.struct("seq", "src", "line"))
    merged = rows.groupBy("window_start", "partition", "key").agg(winner.alias("w"))
    merged = merged.select("window_start", "w.window_end", "partition", "key", "w.value", "w.value_num", "w.seq")
    try:
        merged.sortWithinPartitions("window_start", "partition", "key").write.parquet(str(target))
    except Exception as error:
        if (found := _MARK.search(str(error))) is None:
            raise
        raise DeltaError(found[1]) from None
    counts = spark.read.parquet(str(target)).agg(F.count(F.lit(1)), F.countDistinct("window_start")).first()
    return [int(count) for count in counts or (0, 0)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hop.stream.view", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("compact", help="merge the new deltas of OUT into a new base").add_argument("out")
    commands.choices["compact"].add_argument("--master", default="local[1]", help="Spark master (local[1])")
    commands.add_parser("show", help="print the view's base path and counts").add_argument("out")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        info = compact(args.out, args.master) if args.command == "compact" else view_info(args.out)
    except (ValueError, OSError, RuntimeError) as error:  # SparkUnavailable is a RuntimeError
        print(f"{_ERROR}{error}", file=sys.stderr)
        return 1
    if info is None:
        print(f"{args.out}: no view yet (no delta compacted)")
        return 1 if args.command == "show" else 0
    took = f" in {time.monotonic() - start:.2f}s" if args.command == "compact" else ""
    print(f"{info.base}: version {info.version}, {info.rows} rows, {info.windows} windows{took}")
    return 0


if __name__ == "__main__":  # run as the importable module, so executors unpickle its functions by reference
    from hop.stream.view import main as _main

    sys.exit(_main())
