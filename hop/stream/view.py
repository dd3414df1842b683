"""The materialized view of a continuous job: Spark compacts its checkpoint deltas into a Parquet table.

Input, written by the job (tmp + rename): ``OUT/_checkpoints/deltas/delta-PPPPP-SSSSSSSS.jsonl`` (reducer partition,
its checkpoint sequence number), a line ``{"window_start": n, "window_end": n, "partition": int (the file's), "key":
any, "value": any}`` (blank lines skipped, other fields ignored). Per (window_start, partition, key) the higher
numbered delta wins, within one the later line. A reducer retried after a crash may rewrite a name it used before:
the rewritten file is a new delta (it wins over the base's rows of that number).

Output: ``OUT/_view/base-VVVVVV/``, a folder of Parquet files to read whole (``spark.read.parquet(base)``), a row
per (window_start, partition, key): ``window_start`` double, ``window_end`` double, ``partition`` int, ``key``
string (compact JSON, sorted object keys), ``value`` string (same JSON; NaN and infinities as ``NaN``,
``Infinity``, ``-Infinity``, as in the job's part files), ``value_num`` double (the value if a number, NaN and
infinities included, else null), ``seq`` long (its delta's number: a delta compacted late but numbered lower still
loses). Its files are *pieces* (``piece-IIIIIIII-NNN.parquet``), each holding every row of a range of window_start
(:mod:`hop.stream.pieces` plans which a compaction writes). ``OUT/_view/_manifest.json`` (replaced atomically; the
commit point; readers open its base, never a listing): ``version``, ``base`` (absolute as written; taken by its name in
the ``_view`` folder it is in, so an ``OUT`` moved or copied elsewhere names and compacts its own), ``deltas`` (how many
delta files were compacted so far, a file rewritten under a compacted name counting again), ``rows``, ``windows``
(distinct window_start), ``compacted_at``, ``last_deltas`` (name -> inode:size:mtime, of the last compaction only),
``pieces`` (``id``, ``lo`` and ``hi`` its least and greatest window_start, ``rows``, ``windows``, ``level`` its merge
generation, ``files``), ``next_piece``. Its size does not grow with the deltas compacted (a job runs for days,
writing a delta per reducer every few seconds, and a list of their names grew by a megabyte a day, every byte
rewritten at every compaction), only with the pieces, which the merges keep few. A manifest without ``pieces``
(written before them) names a base of Parquet files that is one legacy piece: read as it is, and rewritten whole
into a piece by the next compaction, once.

:func:`compact` (one at a time per OUT, ``_view/_lock``) deletes the files of ``last_deltas`` still there unchanged
(a crash came between that manifest and its deletes) and checks every other delta (before a JVM starts), counting
its rows' window starts; it first pins each (a hard link in a ``_view/_reading-*`` folder, removed as it ends), so
the check and Spark read the same bytes even if a retried reducer replaces the delta meanwhile (read again by the
next one). Its cost is its new deltas' and the pieces they touch, never the whole base's: it plans which pieces to
write (:func:`hop.stream.pieces.plan`), and one Spark job merges the new rows with those pieces' old rows, under a
temporary name; the new base folder gets the pieces written and, for every other piece, its file from the current
base, linked (a hard link, unread and unchanged; a copy where the file system has no links), and is renamed into
place complete. Then it replaces the manifest, deletes the bases but the new and the previous one (its readers are
not cut off: a file both hold stays while either does) and the deltas it read, unless rewritten since (each renamed
aside, then checked: a replacement that lands meanwhile is kept). Files are never written in place: a piece
rewritten is a new file. The job never deletes deltas; only compaction deletes bases. Idempotent: a crash before the
manifest is replaced leaves the old view and all deltas for the next run, which clears what the crashed one left.
With no new delta it starts no Spark and returns the current view (``None`` before the first), deleting older bases
a crash after a manifest left; new deltas of blank lines only change the manifest's delta counts. A bad delta line
raises :class:`DeltaError` naming file and line, changing nothing. Executors must see OUT (a local master, or a
shared disk). CLI: ``python -m hop.stream.view compact|show OUT [--master M]``.

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
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hop.outputs import OutputRemovedError, make_in_output, output_changed, output_removed
from hop.stream.pieces import Piece, Target, plan, target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SPARK_CONF", "DeltaError", "ViewInfo", "compact", "main", "pending_deltas", "view_info"]

DELTAS_DIR = Path("_checkpoints", "deltas")
VIEW_DIR = "_view"
MANIFEST = "_manifest.json"
_DELTA_NAME = re.compile(r"^delta-(\d{5,})-(\d{8,})\.jsonl$")
_BASE_NAME = re.compile(r"^base-\d{6,}$")
_READING = "_reading-"
"""Under ``_view``, the start of the name of a folder of links to the deltas a compaction reads (:func:`_pin`),
removed as it ends (or by a later compaction)."""
_ASIDE = ".deleting"
"""Ends the name of a delta renamed aside to be deleted (:func:`_delete_if_unchanged`)."""
_PART_FILE = re.compile(r"^part-.*\.parquet$")  # what Spark writes (not its _SUCCESS, nor .crc files)
_MARKED = "<<hop-delta-error {} hop-delta-error>>"  # Spark ships only the text of an executor's traceback
_MARK = re.compile(r"<<hop-delta-error (.*?) hop-delta-error>>", re.S)
_ERROR = "hop.stream.view: error: "
_COLUMNS = ("window_start", "window_end", "partition", "key", "value", "value_num", "seq")
_SCHEMA = "window_start double, window_end double, partition int, key string, value string, value_num double, "
_SCHEMA += "seq long, src long, line long, piece long"  # src: 0 for a base row, 1 for a delta row; line: in its delta;
# piece: the one of the new base it goes to
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
    """The committed view: its version, the absolute path of its Parquet base (a folder of Parquet files, to read
    whole), its rows and distinct windows, and the pieces its files make (1 for a base written before pieces)."""

    version: int
    base: str
    rows: int
    windows: int
    pieces: int = 1


class _Delta(NamedTuple):
    name: str
    partition: int
    seq: int
    stamp: str  # inode:size:mtime_ns: a rewrite (tmp + rename) changes it
    read: str = ""
    """The pinned file this compaction reads (:func:`_pin`): the delta as it was when pinned, whatever replaces it."""


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


def _base(out: Path, manifest: dict[str, Any]) -> Path:
    """The base folder ``manifest`` names, in ``out``'s view: the manifest's path is where ``out`` was as it was
    written, and an output moved since (``mv out archive/``) named the old place, gone, and failed its next
    compaction, which reads and links the current base's files."""
    return out.resolve() / VIEW_DIR / Path(manifest["base"]).name


def _info(out: Path, manifest: dict[str, Any]) -> ViewInfo:
    pieces = len(manifest.get("pieces", [None]))
    return ViewInfo(int(manifest["version"]), str(_base(out, manifest)), int(manifest["rows"]),
                    int(manifest["windows"]), pieces)  # fmt: skip


def view_info(out_dir: PathLike) -> ViewInfo | None:
    """The view as the manifest of ``out_dir`` describes it; ``None`` when nothing was compacted yet."""
    return None if (manifest := _manifest(Path(out_dir))) is None else _info(Path(out_dir), manifest)


def _stamp(path: Path) -> str | None:
    with contextlib.suppress(FileNotFoundError):
        return _stamp_of(path.stat())
    return None


def _stamp_of(stat: os.stat_result) -> str:
    return f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"


def _pin(out: Path, deltas: list[_Delta], folder: Path) -> list[_Delta]:
    """``deltas`` with the files this compaction reads: each linked into ``folder`` (copied from one open file where
    the file system has no links), stamped as pinned. A reducer retried while a compaction runs may
    replace a delta (tmp + rename) between the check of its lines and Spark's read of it: both now read the same
    bytes, those the stamp names (a delta replaced since stays for the next compaction), where Spark read rows the
    plan had not counted, of windows whose pieces were only linked, and left them out of the version."""
    pinned = []
    for delta in deltas:
        source, copy = out / DELTAS_DIR / delta.name, folder / delta.name
        try:
            os.link(source, copy)
            stamp = _stamp(copy)
        except FileNotFoundError:
            continue  # (only a compaction deletes deltas, and this one holds the lock)
        except OSError:
            with open(source, "rb") as file, open(copy, "wb") as target:
                stamp = _stamp_of(os.fstat(file.fileno()))
                shutil.copyfileobj(file, target)
        if stamp is not None:
            pinned.append(delta._replace(stamp=stamp, read=str(copy)))
    return pinned


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


def _parse_delta(item: tuple[str, str, int, int, Target | None]) -> Iterator[tuple[Any, ...]]:
    """The rows of a delta file, each with the piece it goes to (0 without ``where``, as the deltas are checked);
    ``item``: the file read, the delta's own path (named in errors), its partition and number, ``where``."""
    read, path, partition, seq, where = item
    with open(read, "rb") as file:
        for number, raw in enumerate(file, 1):
            try:
                if raw.strip():
                    row = _row(partition, seq, number, raw)
                    yield (*row, 0 if where is None else target(where, row[0]))
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
    running): a session, or a function giving one, called only once the new deltas have been checked and hold a row
    (so nothing new, or a bad line, costs no JVM start). Else on a session started on ``spark_master`` and stopped at
    the end, its JVM with it. An ``out_dir`` that is not there has nothing to compact (None), and is not made.
    ``identity`` (``hop.outputs.output_identity``, a running job's ``OUT`` as it started): another directory under
    its name is not the job's, and raises :class:`~hop.outputs.OutputRemovedError` with nothing made or read there."""
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
        _recover_aside(out)
        new, left = _deltas(out, manifest)
        for delta in left:
            _delete_if_unchanged(out / DELTAS_DIR / delta.name, delta.stamp)
        _remove_reading_folders(view)
        if not new:
            if manifest is None:
                return None
            # A crash between a manifest and its deletes left older bases: only the view's and the one before stay.
            _prune_bases(view, {Path(manifest["base"]).name, f"base-{int(manifest['version']) - 1:06d}"})
            return _info(out, manifest)
        reading = Path(tempfile.mkdtemp(prefix=_READING, dir=view))  # (a fresh name: a leftover cannot block it)
        try:
            return _compact_new(out, manifest, _pin(out, new, reading), spark_master, spark)
        finally:
            shutil.rmtree(reading, ignore_errors=True)


def _compact_new(
    out: Path,
    manifest: dict[str, Any] | None,
    new: list[_Delta],
    spark_master: str,
    spark: SparkSession | Callable[[], SparkSession] | None,
) -> ViewInfo | None:
    """Compact the ``new`` deltas (pinned) into the view of ``out`` whose manifest is ``manifest``."""
    view = out / VIEW_DIR
    starts = Counter[float]()
    for delta in new:  # checked here, before a JVM starts: a bad line fails at once, naming file and line
        try:
            item = (delta.read, str(out / DELTAS_DIR / delta.name), delta.partition, delta.seq, None)
            for row in _parse_delta(item):
                starts[row[0]] += 1
        except DeltaError as error:
            marked = _MARK.search(str(error))
            raise DeltaError(marked.group(1) if marked else str(error)) from None
    if manifest is None and not starts:  # nothing but blank lines, and no view yet: none to make
        for delta in new:
            _delete_if_unchanged(out / DELTAS_DIR / delta.name, delta.stamp)
        return None
    record: dict[str, Any] = {} if manifest is None else dict(manifest)
    record.update(deltas=_compacted(manifest) + len(new), compacted_at=time.time())
    record.update(last_deltas={d.name: d.stamp for d in new})
    if starts:  # (else only blank lines: the base stays as it is)
        record.update(_new_base(out, manifest, new, starts, spark_master, spark))
    first = ("version", "base", "deltas", "rows", "windows", "compacted_at")
    record = {name: record[name] for name in first} | record  # (in the order the module docstring lists them)
    _commit(view, record)
    if manifest is not None and record["version"] != manifest["version"]:
        _prune_bases(view, {Path(record["base"]).name, Path(manifest["base"]).name})  # the previous one's readers go on
    for delta in new:
        _delete_if_unchanged(out / DELTAS_DIR / delta.name, delta.stamp)
    return _info(out, record)


def _remove_reading_folders(view: Path) -> None:
    """Remove the folders of pinned deltas a compaction that crashed left (the caller holds the lock)."""
    for entry in view.iterdir():
        if entry.name.startswith(_READING):
            shutil.rmtree(entry, ignore_errors=True)


def _delete_if_unchanged(path: Path, stamp: str) -> None:
    """Delete the delta at ``path`` if it is still the file ``stamp`` names. Renamed aside first, then checked: a
    retried reducer's replacement renamed onto ``path`` between a check and a delete by name was deleted unread;
    one that lands before the rename is put back (unless a newer one has taken the name since)."""
    aside = path.with_name(path.name + _ASIDE)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if _stamp(aside) != stamp:
        _put_back(aside, path)
    aside.unlink(missing_ok=True)


def _put_back(aside: Path, path: Path) -> None:
    """Give the delta renamed ``aside`` its name ``path`` again, unless a newer file has taken it (that one wins)."""
    try:
        os.link(aside, path)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links
        if not path.exists():
            os.rename(aside, path)


def _recover_aside(out: Path) -> None:
    """Put back the deltas a crashed compaction had renamed aside (one it had compacted is then deleted as read)."""
    folder = out / DELTAS_DIR
    for name in sorted(os.listdir(folder)) if folder.is_dir() else []:
        if name.endswith(_ASIDE) and _DELTA_NAME.match(name[: -len(_ASIDE)]):
            _put_back(folder / name, folder / name[: -len(_ASIDE)])
            (folder / name).unlink(missing_ok=True)


def _prune_bases(view: Path, keep: set[str]) -> None:
    """Delete the base folders of ``view`` but those named in ``keep``."""
    for entry in view.iterdir():
        if _BASE_NAME.match(entry.name) and entry.name not in keep:
            shutil.rmtree(entry, ignore_errors=True)


def _commit(view: Path, record: dict[str, Any]) -> None:
    """Replace the manifest with ``record``: the compaction's commit point."""
    (view / f"{MANIFEST}.tmp").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(view / f"{MANIFEST}.tmp", view / MANIFEST)


def _pieces(manifest: dict[str, Any] | None) -> list[Piece]:
    """The pieces of the manifest's base (a base written before pieces is one legacy piece)."""
    if manifest is None:
        return []
    if "pieces" not in manifest:
        return [Piece.legacy(int(manifest["rows"]), int(manifest["windows"]))]
    return [Piece.of(record) for record in manifest["pieces"]]


def _new_base(
    out: Path,
    manifest: dict[str, Any] | None,
    new: list[_Delta],
    starts: Counter[float],
    spark_master: str,
    spark: SparkSession | Callable[[], SparkSession] | None,
) -> dict[str, Any]:
    """Write the next version's base: the pieces the plan writes by Spark, the others linked from the current base,
    renamed into place complete. Returns the manifest's fields that describe it."""
    view = out / VIEW_DIR
    version = (manifest["version"] if manifest else 0) + 1
    base, temporary, written = (view / f"{name}{version:06d}" for name in ("base-", "_tmp-base-", "_tmp-write-"))
    current = _base(out, manifest) if manifest else None
    todo = plan(_pieces(manifest), starts, int(manifest.get("next_piece", 1)) if manifest else 1)
    sources = {
        piece_id: [str(path) for piece in old for path in _paths(current, piece)]
        for piece_id, old in todo.written.items()
    }
    items = [(d.read, str(out / DELTAS_DIR / d.name), d.partition, d.seq, todo.where) for d in new]
    # (not at the top: executors import this module)
    from hop.spark_engine import shutdown_jvm, start_session, stop_interrupted_session, stop_session

    if spark is None:
        try:
            session = start_session(spark_master, "hop view compaction", quiet=True, conf=SPARK_CONF)
        except BaseException:  # (Ctrl-C as the session started, its JVM up: its temporary directory was left)
            shutdown_jvm()
            raise
    else:
        session = spark() if callable(spark) else spark
    merged = False
    try:
        for leftover in (temporary, written):  # left by a run that was killed
            shutil.rmtree(leftover, ignore_errors=True)
        stats = _merge(session, items, sources, written)
        merged = True
        temporary.mkdir()
        pieces = []
        for piece_id in todo.pieces:
            if piece_id in todo.kept:
                piece = todo.kept[piece_id]
                for source, name in zip(_paths(current, piece), piece.names(), strict=True):
                    _link(source, temporary / name)  # unchanged: the same file, not a copy (where links exist)
            else:
                rows, windows, lo, hi = stats[piece_id]
                files = sorted(f for f in os.listdir(written / f"piece={piece_id}") if _PART_FILE.match(f))
                piece = Piece(piece_id, lo, hi, rows, windows, todo.levels[piece_id], len(files))
                for name, file in zip(piece.names(), files, strict=True):
                    os.replace(written / f"piece={piece_id}" / file, temporary / name)
            pieces.append(piece)
        shutil.rmtree(base, ignore_errors=True)  # left by a run that crashed before its manifest
        os.replace(temporary, base)
    finally:
        for leftover in (temporary, written):
            shutil.rmtree(leftover, ignore_errors=True)
        if spark is None:
            # (a merge cut short: interrupted, as hop view --compact is by Ctrl-C or SIGTERM, or failed, said by its
            # error; either way what Spark logs as its job is stopped is no news)
            (stop_session if merged else stop_interrupted_session)(session)
            shutdown_jvm()
    return dict(
        version=version,
        base=str(base),
        rows=sum(piece.rows for piece in pieces),
        windows=sum(piece.windows for piece in pieces),  # (their ranges are disjoint)
        pieces=[piece.record() for piece in pieces],
        next_piece=todo.next_piece,
    )


def _paths(base: Path | None, piece: Piece) -> list[Path]:
    """The files of ``piece`` in ``base`` (a legacy piece: its folder, all of it)."""
    assert base is not None
    return [base] if piece.files is None else [base / name for name in piece.names()]


def _link(source: Path, target: Path) -> None:
    """Make ``target`` the file ``source`` is: a hard link, or a copy on a file system without them."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _merge(
    spark: SparkSession, items: list[tuple[str, str, int, int, Target]], sources: dict[int, list[str]], target: Path
) -> dict[int, tuple[int, int, float, float]]:
    """Write the winners among the deltas and the old pieces' rows (``sources``: new piece -> the files of the old
    pieces it takes) to ``target/piece=ID/``; return each written piece's rows, windows, least and greatest start."""
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    parsed = sc.parallelize(items, min(len(items), 4 * sc.defaultParallelism)).flatMap(_parse_delta)
    rows = spark.createDataFrame(parsed, _SCHEMA)
    zero = F.lit(0).cast("long")
    for piece_id, paths in sources.items():  # a base row loses to a delta row of the same number (a rewritten delta)
        if paths:
            old = spark.read.parquet(*paths).select(*_COLUMNS, zero.alias("src"), zero.alias("line"))
            rows = rows.unionByName(old.withColumn("piece", F.lit(piece_id).cast("long")))
    winner = F.max_by(F.struct("window_end", "value", "value_num", "seq"), F.struct("seq", "src", "line"))
    merged = rows.groupBy("piece", "window_start", "partition", "key").agg(winner.alias("w"))
    merged = merged.select(
        "piece", "window_start", "w.window_end", "partition", "key", "w.value", "w.value_num", "w.seq"
    ).repartition("piece")  # a piece's rows in one task: one file per piece
    try:
        ordered = merged.sortWithinPartitions("piece", "window_start", "partition", "key")
        ordered.write.partitionBy("piece").parquet(str(target))
    except Exception as error:
        if (found := _MARK.search(str(error))) is None:
            raise
        raise DeltaError(found[1]) from None
    stats = (
        spark.read.parquet(str(target))
        .groupBy("piece")
        .agg(F.count(F.lit(1)), F.countDistinct("window_start"), F.min("window_start"), F.max("window_start"))
    )
    return {int(r[0]): (int(r[1]), int(r[2]), float(r[3]), float(r[4])) for r in stats.collect()}


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
