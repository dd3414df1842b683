"""Input: which files a job reads, how they are cut into splits, and how a split becomes records.

- Paths may be files, directories (their files, at any depth) and glob patterns (``**`` matching directories at
  any depth); directories and globs skip names starting with ``_`` or ``.``, as Hadoop does, so a job's output
  directory (or ``out/*``) can be read as input, and they skip the output directory of the job that reads them.
- A plain file is cut into splits of about ``split_size`` bytes, as many as fill whole waves of the cluster's map
  slots (``split_size_for``). A line belongs to the split that holds its first byte, so
  each line is read exactly once whatever the split boundaries. Compressed files (``.gz``, ``.bz2``, ``.xz``, ``.lzma``,
  by their suffix, as Hadoop's codecs and mrjob pick them) are read decompressed, whole: each makes one split.
- Records are ``(key, value)``: for ``text`` the key is the byte offset of the line in its (uncompressed) file and the
  value the line without its trailing ``\\n`` or ``\\r\\n``; ``jsonl`` parses each non-blank line as JSON
  (arrays as tuples at any depth, inside objects too, as values that crossed the shuffle are);
  ``csv`` parses each line as one CSV row (a list of strings; quoted fields may not span lines); ``output`` reads a
  hop output file (``json(key) TAB json(value)``) back as pairs,
  which is how a multi-step job feeds one step into the next (:func:`parse_output_line`, on Spark too).
- Undecodable bytes and unparsable lines raise :class:`InputError` naming the file and byte offset, or, given an
  ``on_bad`` callback (``--skip-bad-records``), are passed to it as ``(offset, line, error)`` and left out.
"""

from __future__ import annotations

import bz2
import csv
import errno
import glob
import gzip
import json
import lzma
import operator
import os
import re
import time
import types
import zlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat
from operator import add
from pathlib import Path
from typing import IO, Any, NamedTuple

from hop.pathnames import EMPTY_NAME, NOT_UTF8, non_utf8_bytes

CHUNK_BYTES = 1 << 19
"""Bytes read at a time: small enough that a chunk, its text and its lines stay in the CPU caches (4 MiB read
lines about a third slower than 512 KiB)."""
UTF8_BOM = b"\xef\xbb\xbf"  # at the start of a file: skipped, as Hadoop's line reader and Python's utf-8-sig do
MIN_SPLIT_SIZE_OPTION = 64_000
"""The smallest ``--split-size``: a map task costs a process's task set-up, a commit and a final spill whatever its
split, so splits this small only multiply them (``--split-size 1`` made a map per byte: 5,000 maps took 86 s for
what one did in 1 s, and a large input could fill the coordinator's memory with tasks)."""
DEFAULT_SPLIT_BYTES = 128 << 20
"""Default split size (``--split-size``): Hadoop's block size and Spark's ``maxPartitionBytes``. Each map task has
a fixed cost (its final spill holds every distinct key it saw, which the reducers fold again), and a retried map
resumes from its last checkpoint rather than from its split's start, so small splits buy little. With 32 MB, 150 MB
of text made 4 maps in two waves on 2 slots; with this, 2 in one: the word count 1.5-4.6% and the heavy reduce 2.9%
faster (bench/results/README.md)."""
MIN_SPLIT_BYTES = 1 << 20
"""Input is not cut finer than this to give more map slots work (``split_size_for``)."""
MAX_LINE_BYTES = 256 << 20
"""Default bound on one line (record) of text input."""


COMPRESSIONS: dict[str, tuple[types.ModuleType, str]] = {
    ".gz": (gzip, "gzip"),
    ".bz2": (bz2, "bzip2"),
    ".xz": (lzma, "xz"),
    ".lzma": (lzma, "xz"),  # lzma.open tells the two formats apart
    # A compressed tar archive's short names: read decompressed, it is then named as an archive to extract (read
    # as text since the name did not say compressed, it was named as gzip data "to rename .gz").
    ".tgz": (gzip, "gzip"),
    ".tbz2": (bz2, "bzip2"),
    ".tbz": (bz2, "bzip2"),
    ".txz": (lzma, "xz"),
}
"""Inputs read decompressed, known by their suffix (in any case): the module whose ``open`` reads them, and the
command that tests such a file. A compressed file cannot be cut at a byte offset, so it is one split (and one chunk
for online aggregation)."""
DECOMPRESSION_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)
"""What reading a truncated or corrupt compressed file raises (bz2 and gzip raise OSError or EOFError)."""


def _compression(path: str) -> tuple[types.ModuleType, str] | None:
    return COMPRESSIONS.get(os.path.splitext(path)[1].lower())


def is_compressed(path: str) -> bool:
    return _compression(path) is not None


def compressed_text_bytes(path: str, size: int) -> int:
    """How many bytes of text the compressed file ``path`` of ``size`` bytes is taken to hold, to weigh it beside
    plain files in map tasks and progress (read whole, it costs its text, not its file: a .gz of logs holds ten
    times its size). For gzip, the length its trailer gives (ISIZE: the text's, modulo 4 GiB, of its last member)
    when that is at least ``size`` (text compresses: a smaller one is of a text past 4 GiB, or of the last of several
    members); else, and for other formats, ``size``. A guide, never less than the file: a text past 4 GiB may give a
    length short of its own, several members their last one's, bytes after the gzip data any number."""
    if _compression(path) != COMPRESSIONS[".gz"] or size < 18:  # (a gzip member is at least 18 bytes)
        return size
    try:
        with open(path, "rb") as file:
            file.seek(size - 4)
            trailer = file.read(4)
    except OSError:
        return size
    text = int.from_bytes(trailer, "little") if len(trailer) == 4 else 0
    return text if text >= size else size


class InputError(ValueError):
    """Bad input: a missing path, unreadable file or undecodable record. The message names file and offset."""


class BadRecordError(InputError):
    """One input line that cannot be decoded or parsed (not UTF-8, not JSON, not a CSV row, not an output line):
    a bad record, which a batch job can skip (``--skip-bad-records``), unlike a missing or unreadable file."""


class FileStamp(NamedTuple):
    """What identifies one version of an input file: a file rewritten in place changes its modification time (and
    mostly its size), one replaced by a rename its inode. ``tail`` (a plain file's) is the CRC-32 of its last
    :data:`TAIL_BYTES` bytes, which tell a file appended to (read up to its size then, as documented) from one
    rewritten longer."""

    size: int
    mtime_ns: int
    inode: int
    tail: int = 0

    @classmethod
    def of(cls, file: int | str) -> FileStamp:
        """The stamp of the file open as descriptor ``file`` (its ``tail`` left 0), or of the file at path
        ``file``, its ``tail`` read if it is plain."""
        if isinstance(file, int):
            status = os.fstat(file)
            return cls(status.st_size, status.st_mtime_ns, status.st_ino)
        with open(file, "rb") as opened:
            status = os.fstat(opened.fileno())
            tail = 0 if is_compressed(file) else _tail_crc(opened.fileno(), status.st_size)
        return cls(status.st_size, status.st_mtime_ns, status.st_ino, tail)

    def identifies(self, other: FileStamp) -> bool:
        """Whether ``other`` (its ``tail`` not read) is the same version of the file."""
        return (self.size, self.mtime_ns, self.inode) == other[:3]


TAIL_BYTES = 4096
"""The bytes at the end of a plain input file whose checksum the job keeps (:class:`FileStamp`): a rewrite almost
always changes them, an append never does."""


def _tail_crc(descriptor: int, size: int) -> int:
    """CRC-32 of the :data:`TAIL_BYTES` bytes before byte ``size`` of the open file."""
    start = max(0, size - TAIL_BYTES)
    return zlib.crc32(os.pread(descriptor, size - start, start))


@dataclass(frozen=True)
class Split:
    """A byte range of one input file; ``length == -1`` means the whole (unsplittable) file.

    ``stamp``: the file as it was when the job cut it into splits (:func:`make_splits`); a split read from a file
    that is no longer that version raises :class:`InputError` (:func:`iter_lines`) rather than mix versions in the
    output. ``None`` (a file another step of the run writes, read as it is) is not checked. Not compared: a split is
    its byte range."""

    path: str
    start: int
    length: int
    stamp: FileStamp | None = field(default=None, compare=False)

    @property
    def end(self) -> int:
        return self.start + self.length if self.length >= 0 else -1

    def describe(self) -> str:
        return self.path if self.length < 0 else f"{self.path}[{self.start}:{self.end}]"


class ReadLimit:
    """Where a split being read ends, which its reader may move earlier while it reads (tail splitting: the rest of
    a straggling map's split goes to an idle slot as a new map).

    :func:`iter_lines` sets ``position`` as it reads: every line that starts before it has been read (and handed
    out, or is in the batch being handed out); none that starts at or after it has. So the split can end at any byte
    from ``position`` on without a line read twice or lost: the lines starting before the new end are this split's,
    and a split starting at that byte skips the line holding the byte before it, as every split does (the first line
    of a file that starts with a BOM starts after it: a split starting in the BOM or right after it reads that line)."""

    def __init__(self, split: Split) -> None:
        self.split = split
        self.position = split.start
        """Where the first line not yet read starts (after a split's first partial line is skipped, past it)."""

    @property
    def end(self) -> int:
        return self.split.end

    def cut(self, keep: float, min_bytes: int) -> Split | None:
        """End the split ``keep`` (0-1) of the way from ``position`` to its end, at the earliest, and return the
        rest as a split of its own; ``None`` (nothing changed) if the rest would be shorter than ``min_bytes`` or
        the split is a whole file (compressed files are read whole)."""
        split = self.split
        if split.length < 0:
            return None
        at = self.position + int((split.end - self.position) * keep)
        if split.end - at < max(1, min_bytes):
            return None
        self.split = Split(split.path, split.start, at - split.start, split.stamp)
        return Split(split.path, at, split.end - at, split.stamp)


def absolute_inputs(patterns: list[str]) -> list[str]:
    """``patterns`` (files, directories, globs) made absolute against the working directory, as both engines take
    them (``os.path.abspath``: links are kept as given): the files they expand to, and so ``self.input_file``,
    errors and ``_job.json``'s ``inputs``, name absolute paths whatever directory the run started in."""
    return [os.path.abspath(pattern) for pattern in patterns]


def expand_inputs(patterns: list[str], output: str | None = None) -> list[str]:
    """Resolve files, directories and globs to a de-duplicated list of files, in the order named (a directory's and
    a glob's in name order).

    A directory is read with its subdirectories, at any depth (``logs/2026-11-25/app.log``), as mrjob reads one;
    names starting with ``_`` or ``.`` are left out at every level, and so is the job's ``output`` directory if it
    lies inside an input directory (it is being written).

    A file named more than once (``data/ data/a.txt``, ``data/a.txt ./data/a.txt``, or through a symbolic link) is
    read once, where first named; :func:`repeated_inputs` says which.

    Raises :class:`InputError` for a pattern that matches nothing, a directory that holds no file, a path that
    cannot be read, a file compressed in a format hop does not decompress (:data:`UNREAD_COMPRESSION`), or a
    compressed file of 0 bytes (not even its format's header).
    """
    seen: set[str] = set()
    files = []
    for file in _named_files(patterns, output):
        if _same_file(file) not in seen:
            seen.add(_same_file(file))
            files.append(file)
    return files


def input_being_written(patterns: Iterable[str], writing: dict[Path, str], address: str) -> str | None:
    """Why a job reading ``patterns`` is refused when one of them is (or names a file of) the output directory of a
    batch job still running, or is a folder holding it (``writing``: each such output, resolved, and its job id, on
    the coordinator at ``address``), or None: it would read the part files committed so far, part of the data, and
    succeed on it as if on all, or find the directory holding no file yet. The coordinator refuses such a job with
    this; ``hop submit``, whose own check of the inputs fails first on a directory holding no part yet, says it
    too."""
    for pattern in patterns:
        named = glob.glob(pattern, recursive=True) if glob.has_magic(pattern) else [pattern]
        # A glob matching nothing (``counts/part-*`` before the first part commits) counts where its fixed part is,
        # if that lies in the output (a folder holding the output may hold nothing the glob would match).
        unmatched = not named
        for name in [str(Path(*_fixed_prefix(Path(pattern).parts)))] if unmatched else named:
            path = Path(name).resolve()
            for output, job_id in writing.items():
                inside = path == output or output in path.parents
                # (a folder is read without its names starting with _ or .: a pipeline's .OUT.steps-* scratch)
                around = not unmatched and path in output.parents and not _hidden_below(path, output)
                if inside or around:
                    what = "is" if inside else f"holds {output},"
                    return (
                        f"input {pattern} {what} the output of job {job_id}, still running: its part files are "
                        f"not all written yet; submit this job again once it has ended (hop status {job_id} "
                        f"--coordinator {address})"
                    )
    return None


def _hidden_below(folder: Path, path: Path) -> bool:
    """Whether reading ``folder`` leaves ``path``, inside it, out: a name on the way starts with ``_`` or ``.``
    (:func:`expand_inputs`)."""
    return any(part.startswith(("_", ".")) for part in path.relative_to(folder).parts)


def repeated_inputs(patterns: list[str], output: str | None = None) -> list[str]:
    """What to tell the user of the files that more than one of ``patterns`` name (the same one given twice
    counts twice), each read once (:func:`expand_inputs`): a message per file, naming the patterns. A pattern that
    names a file twice itself (``data/**`` matches ``data/`` and ``data/a.txt``) is no repeat: nothing says that
    it should be read twice. Raises as :func:`expand_inputs` does."""
    named_by: dict[str, list[str]] = {}
    for pattern in patterns:
        for file in dict.fromkeys(_same_file(file) for file in _named_files([pattern], output)):
            named_by.setdefault(file, []).append(pattern)
    messages = []
    for file, names in named_by.items():
        if len(names) > 1:
            # (a name given again is said once, with its count: "('a.txt' and 'a.txt')" read as a typo of ours)
            counted = {name: names.count(name) for name in names}
            said = [
                repr(name) + ("" if n == 1 else " twice" if n == 2 else f" {n} times") for name, n in counted.items()
            ]
            *first, last = said
            given = f"{', '.join(first)} and {last}" if first else last
            messages.append(f"input file {file} is named {len(names)} times ({given}): it is read once")
    return messages


def _same_file(path: str) -> str:
    """``path`` as one name per file named (``data/a.txt``, ``./data/a.txt`` and ``/abs/data/a.txt`` alike, and a
    symbolic link to it: a log directory's ``latest.log`` doubled the records of the file it links to)."""
    return os.path.realpath(path)


def _named_files(patterns: list[str], output: str | None) -> list[str]:
    """Every file each of ``patterns`` names, in order, repeats kept; raises as :func:`expand_inputs` says."""
    files: list[str] = []
    skip = os.path.abspath(output) if output is not None else None
    for pattern in patterns:
        if not pattern:  # (read as the current directory: all of it was the job's input)
            raise InputError(f"an input is an empty name (an unset shell variable?): {EMPTY_NAME}")
        # A name that exists is that file or directory, even if it holds *, ? or [ ("data[1].txt" matched no file).
        if glob.has_magic(pattern) and not os.path.lexists(pattern):
            matches = _glob_matches(pattern, skip)
        else:
            matches = [pattern]
        if not matches:
            raise InputError(
                f"input {pattern!r} matches no file (names starting with _ or . are left out); check the path or "
                f"quote the glob{_tilde_hint(pattern)}"
            )
        for match in matches:
            path = Path(match)
            try:
                path.stat()
            except PermissionError as error:
                raise InputError(
                    f"input {match}: cannot access it ({error.strerror}); check the permissions of "
                    "it and its parent directories"
                ) from error
            except OSError as error:
                if error.errno == errno.ENAMETOOLONG:  # (Path.is_dir raised it below: a traceback)
                    raise InputError(
                        f"input {match}: {error.strerror} (a name in a path holds at most 255 bytes, a path 4,096 on "
                        "Linux); check the path"
                    ) from None
                # missing: reported below
            if path.is_dir():
                if skip is not None and os.path.realpath(match) == os.path.realpath(skip):
                    # (made by the run already, so "holds no file to read" named a folder the user never made)
                    raise InputError(
                        f"input {match} is the job's output directory: a job cannot read the directory it writes; "
                        "give another output directory (-o)"
                    )
                found = _files_under(path, skip)
                if not found:
                    raise InputError(
                        f"input directory {match} holds no file to read (names starting with _ or . are left out)"
                    )
                files.extend(found)
            elif path.is_file():
                files.append(_file_opened_as(str(path)))
            elif path.exists():
                raise InputError(
                    f"input {match} is not a regular file or a directory (a pipe, socket or device): maps read "
                    f"inputs by byte offset, so {_how_to_give(match)}"
                )
            elif path.is_symlink():  # (named on the command line, or matched by a glob)
                remedy = "restore its target, or remove the link" if match != pattern else "restore its target"
                raise _broken_link(path, remedy)
            else:
                raise InputError(f"input {match!r} does not exist{_tilde_hint(match)}")
    for file in files:
        name = non_utf8_bytes(file)
        if name is not None:
            raise InputError(
                f"input file {name!r}: {NOT_UTF8}: rename it (convmv -f latin1 -t utf8 --notest renames Latin-1 ones)"
            )
        _check_compression(file)
        _check_not_empty_compressed(file)
        _check_size_holds_its_data(file)
        # Each file, a directory's too: one found unreadable only when the job cut it into splits was refused after
        # --overwrite had cleared the old output, with a bare "[Errno 13] Permission denied".
        if not os.access(file, os.R_OK):
            raise InputError(f"input file {file}: permission denied; check its permissions")
    return files


_MADE_AS_READ = ("/proc/", "/sys/")
"""Where Linux mounts the file systems whose files are made as they are read, giving their size as 0 bytes."""


def _check_size_holds_its_data(path: str) -> None:
    """Refuse a file that gives its size as 0 bytes yet reads data: a file of ``/proc`` or ``/sys``, made as it is
    read. Files are read up to their size, so the job read none of it and succeeded, saying that the input held no
    records. (One that grew between the two looks is a file written to, read as any other.) Opened without
    blocking: a device-like one (``/proc/kmsg``) that would wait for data does not hold the run up. Only files
    named under :data:`_MADE_AS_READ` are looked at: a stat of every input file cost a directory of 3,000 files
    12 ms, each time the inputs are listed."""
    if not (path if path.startswith("/") else os.path.abspath(path)).startswith(_MADE_AS_READ):
        return
    try:
        if os.path.getsize(path) != 0:
            return
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return  # (gone or unreadable: said where it is read)
    try:
        if not os.read(descriptor, 1) or os.fstat(descriptor).st_size != 0:
            return
    except OSError:
        return
    finally:
        os.close(descriptor)
    raise InputError(
        f"input file {path} gives its size as 0 bytes yet holds data (a file of /proc or /sys, made as it is read): "
        f"hop reads a file up to its size, so it would read none of it; copy it to a file (cat {path} > FILE) and "
        "read that"
    )


def _tilde_hint(path: str) -> str:
    """For a missing input with a folder named ``~...`` on its way (``'~/logs'`` quoted, which the shell did not
    expand, made absolute in the working directory), what to write instead; else nothing."""
    if not any(part.startswith("~") for part in Path(path).parts):
        return ""
    return " (~ is expanded by the shell only when not quoted: write the path with $HOME, or leave ~ unquoted)"


UNREAD_COMPRESSION = {
    ".zst": ("Zstandard", "unzstd"),
    ".lz4": ("LZ4", "unlz4"),
    ".zip": ("zip", "unzip"),
    ".7z": ("7-Zip", "7z x"),
    ".z": ("compress", "uncompress"),
    ".snappy": ("Snappy", "a Snappy tool"),
    ".br": ("Brotli", "brotli -d"),
}
"""Compressed formats hop does not decompress (it reads :data:`COMPRESSIONS`): by file name ending, the
format and its tool."""


_NAMED_ONLY = frozenset({".br", ".snappy"})
"""Suffixes of :data:`UNREAD_COMPRESSION` whose data has no first bytes of its own to tell it by (Brotli, Hadoop's
Snappy): a file so named is taken as compressed unless its first bytes read as text."""


def _check_compression(path: str) -> None:
    """Refuse a file compressed in a format hop does not read: its bytes would be read as lines of text, failing
    the job midway as "not valid UTF-8", or, with ``--skip-bad-records``, mapping the lines that happen to
    decode. What its first bytes are decides, not its name alone (the name says it is compressed, since
    :data:`UNREAD_COMPRESSION` has its suffix; no other file is opened here): text named ``notes.zip`` is read as
    text; gzip data named ``.zip`` is named as gzip, with the suffix that makes hop read it."""
    suffix = os.path.splitext(path)[1].lower()
    found = UNREAD_COMPRESSION.get(suffix)
    if found is None:
        return
    head = _head(path)
    if head is None:
        return  # (unreadable: said as such where the inputs are checked)
    data = _data_format(head)
    if data is None:
        if suffix in _NAMED_ONLY and not _text_like(head):
            raise _unread(path, *found)
        return  # its name says compressed, its bytes do not: text (what is not is named where it is read)
    if data in COMPRESSIONS:
        kind = COMPRESSIONS[data][1]
        raise InputError(
            f"input file {path} is {kind} data (its first bytes are {kind}'s), not {found[0]} as its name says: "
            f"rename it to end {data}, which hop reads decompressed"
        )
    raise _unread(path, *UNREAD_COMPRESSION[data])


def _unread(path: str, kind: str, tool: str) -> InputError:
    return InputError(
        f"input file {path} is {kind}-compressed, which hop does not read (it reads .gz, .bz2, .xz and .lzma): "
        f"decompress it ({tool}) or recompress it with gzip"
    )


HEAD_BYTES = 4096
"""How much of a file's start tells text from compressed data (:func:`_text_like`)."""


def _head(path: str) -> bytes | None:
    """The first :data:`HEAD_BYTES` of the file ``path``; None if it cannot be read."""
    try:
        with open(path, "rb") as file:
            return file.read(HEAD_BYTES)
    except OSError:
        return None


def _text_like(head: bytes) -> bool:
    """Whether a file starting with ``head`` reads as UTF-8 text (a character cut at its end allowed), without NUL
    bytes: compressed data of any kind almost never does past its first few bytes."""
    import codecs

    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return b"\0" not in head


def _check_not_empty_compressed(path: str) -> None:
    """Refuse a compressed file of 0 bytes: no compressed data at all, not even a header (``gzip -t`` says
    "unexpected end of file"), so it was cut short or never written. Python's gzip reads it as no text, and so the
    job read it as an empty input and succeeded; such a file is refused before the job starts, as a truncated one
    fails its map, with what to do. (An empty text compresses to a header and a trailer: 20 bytes of gzip.)"""
    compression = _compression(path)
    if compression is None:
        return
    try:
        empty = os.path.getsize(path) == 0
    except OSError:
        return  # (gone or unreadable: said where it is read)
    if empty:
        tool = compression[1]
        raise InputError(
            f"input file {path}: cannot decompress it: it is empty (0 bytes), while {tool} data starts with a "
            f"header, so the file is truncated or was never written (`{tool} -t {path}` fails on it); write it "
            "again, or remove it (or leave it out of the input) if it holds nothing"
        )


def _glob_matches(pattern: str, skip: str | None) -> list[str]:
    """The paths ``pattern`` matches, sorted, ``**`` matching directories at any depth (as in a shell with
    ``globstar``, and as Hadoop and Spark read it), leaving out what a directory listing leaves out: a match with a
    hidden or bookkeeping (``_``) name at a level the pattern's wildcards matched (``data/*/x.txt`` does not read
    ``data/_old/x.txt``, as ``data/`` would not), and the output directory ``skip`` and what it holds (it is being
    written: ``claim_output`` has made it already, so ``data/*`` matched it, empty, and the job was refused)."""
    fixed = len(_fixed_prefix(Path(pattern).parts))
    matches = []
    for match in glob.glob(pattern, recursive=True):
        if not all(_listed(Path(part)) for part in Path(match).parts[fixed:]):
            continue
        if skip is not None and (os.path.abspath(match) + os.sep).startswith(skip + os.sep):
            continue
        matches.append(match)
    return sorted(matches)


def _fixed_prefix(parts: tuple[str, ...]) -> tuple[str, ...]:
    """The leading parts of a glob pattern's path that hold no wildcard."""
    for count, part in enumerate(parts):
        if glob.has_magic(part):
            return parts[:count]
    return parts


def _files_under(folder: Path, skip: str | None, visited: set[str] | None = None) -> list[str]:
    """The listed files in ``folder`` and its listed subdirectories, leaving out the directory ``skip``: each level
    in name order, a directory's files before its subdirectories'. A directory reached again through a symbolic
    link is read once."""
    visited = set() if visited is None else visited
    real = os.path.realpath(folder)
    if real in visited:
        return []
    visited.add(real)
    try:
        entries = sorted(folder.iterdir())
    except PermissionError as error:
        raise InputError(
            f"input directory {folder}: cannot list it ({error.strerror}); check the permissions of it and its parent "
            "directories"
        ) from error
    files = [str(entry) for entry in entries if entry.is_file() and _listed(entry)]
    for entry in entries:
        if entry.is_dir() and _listed(entry) and os.path.abspath(entry) != skip:
            files.extend(_files_under(entry, skip, visited))
        elif _listed(entry) and not entry.is_file() and not entry.is_dir():
            _refuse_unreadable_entry(entry)  # not left out without a word: its data would be missing
    return files


_STANDARD_INPUT_OR_PIPE = re.compile(r"/dev/(stdin|fd/\d+)|/proc/(self|\d+)/fd/\d+")
"""Names of this process's standard input or another open descriptor: ``/dev/stdin``, or a shell's process
substitution (``<(zcat logs.gz)``, ``/dev/fd/63``)."""


def _how_to_give(name: str) -> str:
    """What to do with an input ``name`` that is a pipe, socket or device: for standard input or a process
    substitution, give ``-``, which hop copies to a file itself (was only "write it to a file first")."""
    if _STANDARD_INPUT_OR_PIPE.fullmatch(os.path.abspath(name)):
        return "give - to read standard input, which hop copies to a file first (zcat logs.gz | hop run JOB.py - ...)"
    return "write it to a file first"


def _file_opened_as(name: str) -> str:
    """``name``, or for a name of this process's descriptor that is open on a file (``/dev/stdin`` with ``<
    in.txt``), that file: the maps open the name in processes of their own, whose ``/dev/stdin`` is another, and it
    read as empty there (``input file /dev/stdin is now 0 bytes ...: it was truncated or rewritten while the job
    ran``). One whose file is gone is refused."""
    if not _STANDARD_INPUT_OR_PIPE.fullmatch(os.path.abspath(name)):
        return name
    opened = os.path.realpath(name)
    if not os.path.isfile(opened):  # (deleted since it was opened: "/tmp/x (deleted)")
        raise InputError(f"input {name} is a file no longer in any directory: {_how_to_give(name)}")
    return opened


def _refuse_unreadable_entry(entry: Path) -> None:
    """Raise :class:`InputError` for a listed directory entry that is neither a file nor a directory: a symbolic
    link whose target is gone, or a pipe, socket or device."""
    if entry.is_symlink():
        raise _broken_link(entry, "restore its target, remove the link, or rename it to start with _ to leave it out")
    raise InputError(
        f"input {entry} is not a regular file or a directory (a pipe, socket or device): maps read inputs by byte "
        "offset, so move it out of the input directory or rename it to start with _"
    )


def _broken_link(link: Path, remedy: str) -> InputError:
    """The error for an input ``link`` that is a symbolic link whose target does not exist (or that leads back to
    itself through other links), with what to do (``remedy`` says it for a missing target)."""
    target = os.readlink(link)
    try:
        os.stat(link)
    except OSError as error:
        if error.errno == errno.ELOOP:  # ("which does not exist" sent the user looking for a file that is there)
            remedy = remedy.replace("restore its target", "point it (or a link it leads to) at a file")
            return InputError(
                f"input {link} is a symbolic link to {target}, in a loop of symbolic links that never reaches a file: "
                f"{remedy}"
            )
    return InputError(f"input {link} is a symbolic link to {target}, which does not exist: {remedy}")


def _listed(path: Path) -> bool:
    """Whether a directory listing or a glob includes ``path``: not a hidden or bookkeeping (``_``) name."""
    return path.name[0] not in "_."


def split_size_for(total_bytes: int, split_size: int, slots: int) -> int:
    """The split size to cut ``total_bytes`` of input with, given the ``slots`` (map slots) that will read the
    splits: about ``split_size``, adjusted so that the number of splits is a multiple of ``slots`` (whole waves:
    three equal maps on two slots leave one slot idle for a third of the job, four smaller ones do not), but not
    made smaller than ``MIN_SPLIT_BYTES`` for that (a task's fixed cost would outweigh its share)."""
    if split_size <= 0:
        raise ValueError(f"split size must be positive, got {split_size}")
    if slots <= 1 or total_bytes <= 0:
        return split_size
    tasks = max(1, round(total_bytes / split_size))
    tasks = -(-tasks // slots) * slots
    return max(min(MIN_SPLIT_BYTES, split_size), -(-total_bytes // tasks))


def make_splits(
    files: list[str],
    split_size: int,
    slots: int = 1,
    keep_empty: bool = False,
    whole: bool = False,
    uncut: bool = False,
) -> list[Split]:
    """Cut files into splits of about ``split_size`` bytes (compressed files whole; empty files make no split, or
    with ``keep_empty`` one empty split each); with ``slots``, of ``split_size_for(total, split_size, slots)``
    bytes. With ``whole``, every file is one split, as a compressed one is (an mrjob ``mapper_raw`` reads it); with
    ``uncut``, every plain file is one split of its bytes, however large (read as lines, as any split is)."""
    stamps = [FileStamp.of(path) for path in files]
    split_size = split_size_for(sum(stamp.size for stamp in stamps), split_size, slots)
    splits: list[Split] = []
    for path, stamp in zip(files, stamps, strict=True):
        size = stamp.size
        if whole:
            if size or keep_empty:
                splits.append(Split(path, 0, -1, stamp))
            continue
        if is_compressed(path):
            if size:
                splits.append(Split(path, 0, -1, stamp))
            continue
        if not size:
            if keep_empty:
                splits.append(Split(path, 0, 0, stamp))
            continue
        count = 1 if uncut else max(1, round(size / split_size))
        bounds = [size * i // count for i in range(count + 1)]
        splits.extend(Split(path, lo, hi - lo, stamp) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo)
    return splits


def _open(split: Split) -> IO[bytes]:
    compression = _compression(split.path)
    try:
        return open(split.path, "rb") if compression is None else compression[0].open(split.path, "rb")
    except FileNotFoundError:
        # (listed when the job started: "cannot open (No such file or directory)" left the user to work out when)
        raise InputError(
            f"input file {split.path} no longer exists: it was removed or renamed while the job ran; run the job "
            "again once its inputs stay in place"
        ) from None
    except OSError as error:
        raise InputError(f"input file {split.path}: cannot open ({error.strerror})") from error


def _read_error(path: str, position: int, error: Exception) -> InputError:
    compression = _compression(path)
    if compression is None:
        return InputError(f"input file {path}: read error near byte {position}: {error}")
    module, tool = compression
    if module is gzip and isinstance(error, gzip.BadGzipFile) and (trailing := _gzip_trailing(path)) is not None:
        end, text_bytes, size, head = trailing
        return InputError(
            f"input file {path}: {size - end:,} bytes that are not gzip data follow its gzip data ({head!r}..., "
            f"from byte {end:,} of its {size:,}; its {text_bytes:,} bytes of text decompress whole): gzip -d "
            "ignores such bytes with a warning, hop reads no input it cannot read whole; look at them "
            f"(`tail -c +{end + 1} {path} | od -c | head`) and, if they hold no data, cut them off "
            f"(`truncate -s {end} {path}`)"
        )
    return _not_decompressed(path, tool, position, error, _decompressed_extent(path, module))


def _gzip_trailing(path: str) -> tuple[int, int, int, bytes] | None:
    """For a gzip file followed by bytes that are neither gzip data nor zero padding (which gzip -d ignores with a
    warning, "trailing garbage ignored"): where its last whole gzip member ends, its text's length, the file's size
    and the first bytes after the data. None if the file is not so (or cannot be read, or reading it took longer
    than :data:`EXTENT_SECONDS`)."""
    deadline = time.monotonic() + EXTENT_SECONDS
    try:
        with open(path, "rb") as raw:
            size = os.fstat(raw.fileno()).st_size
            end = text_bytes = 0  # where the members read so far end, and their text
            member: Any = None  # the decompressor of the member being read
            pending = b""  # bytes read, not yet fed to a member
            while time.monotonic() < deadline:
                if member is None:
                    pending = pending.lstrip(b"\0")  # (zero padding between or after members)
                    if len(pending) < 2 and (more := raw.read(CHUNK_BYTES)):
                        pending += more
                        continue
                    if not pending:
                        return None  # (only gzip members and padding)
                    if not pending.startswith(b"\x1f\x8b"):  # (at its start: not gzip data at all)
                        return (end, text_bytes, size, pending[:16]) if end > 0 else None
                    member = zlib.decompressobj(wbits=31)
                data = pending or raw.read(CHUNK_BYTES)
                if not data:
                    return None  # (a member cut short: the file is truncated)
                text_bytes += len(member.decompress(data, CHUNK_BYTES))
                pending = member.unconsumed_tail
                if member.eof:
                    pending = member.unused_data
                    end = raw.tell() - len(pending)
                    member = None
    except (OSError, zlib.error):
        return None
    return None


def _undecodable(path: str, position: int, error: InputError) -> InputError:
    """``error``, for the line at byte ``position`` of ``path``, not UTF-8; for a compressed file that fails to
    decompress further on, the error saying so. A corrupt compressed file (bytes changed, not cut short) decompresses
    into garbage before its checksum fails: its first undecodable line said to re-encode the file as UTF-8."""
    compression = _compression(path)
    extent = None if compression is None else _decompressed_extent(path, compression[0])
    if compression is None or extent is None or extent.error is None:
        return error
    found = _not_decompressed(path, compression[1], extent.text_bytes, extent.error, extent)
    return InputError(f"{found} (its text is not UTF-8 from the line at byte offset {position:,}, before that)")


def _not_decompressed(path: str, tool: str, position: int, error: Exception, extent: _Extent | None) -> InputError:
    """The error for a file compressed for ``tool`` whose text, at byte ``position``, could not be decompressed
    (``error``); ``extent``: how far it decompresses. A file whose first bytes are another format's, or text (its
    name alone said ``tool``), is named as what it is, with what to do."""
    mislabelled = _mislabelled(path, tool)
    if mislabelled is not None:
        return InputError(mislabelled)
    if extent is None:
        what = f"cannot decompress it near byte {position:,} of its text ({error})"
    elif extent.whole:
        what = (
            f"cannot decompress it past byte {extent.text_bytes:,} of its text, having read {extent.read_bytes:,} "
            f"of its {extent.size:,} bytes ({error})"
        )
    else:
        what = (
            f"cannot decompress it ({error}); at least {extent.text_bytes:,} bytes of its text decompress (from the "
            f"first {extent.read_bytes:,} of its {extent.size:,} bytes: counting stopped after "
            f"{EXTENT_SECONDS:g} s)"
        )
    return InputError(
        f"input file {path}: {what}: the file is truncated, corrupt or not {tool} data; "
        f"check it with `{tool} -t {path}`, or rename it if it is not compressed"
    )


def _mislabelled(path: str, tool: str) -> str | None:
    """For a file that failed to decompress as ``tool``'s data, which its name says it is, but whose first bytes
    are another compressed format's or text (a ``.gz`` that is bzip2 data, a plain log named ``.gz``), the error
    naming what it is and what to do; None for another (a truncated or corrupt file, said as such)."""
    head = _head(path)
    if not head:
        return None
    suffix = os.path.splitext(path)[1]
    data = _data_format(head)
    if data is not None:
        kind = _format_name(data)
        if kind == tool:
            return None
        remedy = (
            f"rename it to end {data}, which hop reads decompressed"
            if data in COMPRESSIONS
            else f"decompress it ({UNREAD_COMPRESSION[data][1]}) or recompress it with gzip"
        )
        return f"input file {path} is {kind} data (its first bytes are {kind}'s), not {tool} as its name says: {remedy}"
    if not _text_like(head):
        return None
    return (
        f"input file {path} is not {tool} data: its first bytes are text, and hop reads a file whose name ends "
        f"{suffix} decompressed; rename it without {suffix} to read it as text"
    )


EXTENT_SECONDS = 3.0
"""How long a compressed file that failed to decompress is read again to say how far its text decompresses: past
this, the error gives what was counted as a lower bound (a huge file corrupt near its end would otherwise take as
long again to fail, however large)."""


class _Extent(NamedTuple):
    text_bytes: int
    """Bytes of text decompressed."""
    read_bytes: int
    """Bytes of the file read to get them."""
    size: int
    """Size of the file."""
    whole: bool
    """Whether the count ran until the decompressor failed (else :data:`EXTENT_SECONDS` ran out first, and the
    text goes on at least that far)."""
    error: Exception | None = None
    """What the decompressor raised where it failed (None: it read the text to its end, or the time ran out)."""


def _decompressed_extent(path: str, module: types.ModuleType) -> _Extent | None:
    """How far a compressed file that failed to decompress (or whose text was found not UTF-8) can be read,
    counted for at most :data:`EXTENT_SECONDS`; ``None`` if it cannot be read again.

    Read again from the start, after a failure only: the failed read had lost what it decompressed before the
    error (a line is whole or not at all), so where the reader stood says little (byte 0 for a small file)."""
    text_bytes = 0
    deadline = time.monotonic() + EXTENT_SECONDS
    try:
        with open(path, "rb") as raw:
            size = os.fstat(raw.fileno()).st_size
            with module.open(raw, "rb") as file:
                try:
                    # (read1: one decompressor call at a time, so no text before the error is lost)
                    while chunk := file.read1(CHUNK_BYTES):
                        text_bytes += len(chunk)
                        if time.monotonic() >= deadline:
                            return _Extent(text_bytes, raw.tell(), size, whole=False)
                except DECOMPRESSION_ERRORS as error:
                    return _Extent(text_bytes, raw.tell(), size, whole=True, error=error)
                return _Extent(text_bytes, raw.tell(), size, whole=True)
    except OSError:
        return None


BadLine = Callable[[int, str, str], None]
"""Called with ``(byte offset, line, error)`` for an input line that cannot be read; may raise to stop."""


def iter_lines(
    split: Split,
    max_line_bytes: int = MAX_LINE_BYTES,
    on_bad: BadLine | None = None,
    fallback_encoding: str | None = None,
    limit: ReadLimit | None = None,
) -> Iterator[tuple[int, str]]:
    """Yield ``(byte offset, line)`` for every line whose first byte lies in the split (up to ``limit.end`` as it
    is when the reader gets there, if a :class:`ReadLimit` of ``split`` is given).

    A line longer than ``max_line_bytes`` raises :class:`InputError` (naming file and offset) instead of growing
    memory without bound. A line that is not UTF-8 raises it too, or goes to ``on_bad`` and is left out, or with
    ``fallback_encoding`` is decoded with that (:data:`KEEP_BYTES`: its bytes kept, for mrjob's protocols).
    """
    # The lines of a chunk come out of C iterators chained in C: no Python frame is resumed per line (a generator
    # passing each line on cost about a tenth of the reading), only once per chunk.
    return chain.from_iterable(_line_batches(split, max_line_bytes, on_bad, fallback_encoding, limit))


def _line_batches(
    split: Split,
    max_line_bytes: int,
    on_bad: BadLine | None,
    fallback_encoding: str | None,
    limit: ReadLimit | None,
) -> Iterator[Iterable[tuple[int, str]]]:
    """:func:`iter_lines`'s lines, an iterable of them per chunk read, or with a ``limit`` per
    ``LIMITED_BATCH_LINES`` lines of a chunk (:func:`_batches_within`)."""
    with _open(split) as file:
        _check_unchanged(split, file)  # (a retried map too: it must not read what the first attempt did not)
        position = split.start
        if 0 < split.start <= len(UTF8_BOM) and _starts_with_bom(file):
            # The file's first line starts after its BOM: it is the line of the split holding that byte (the split
            # from 0 takes only lines starting before its end), so a split starting in the BOM or right after it
            # reads it rather than skip it as the split before's.
            position = len(UTF8_BOM)
        elif split.start > 0:
            # The line holding byte start - 1 belongs to the split before, however long it is.
            file.seek(split.start - 1)
            position = split.start - 1 + skip_line(file)
        # What follows the last newline read: the start of a line, gathered in one buffer that grows in place (a
        # line much longer than a chunk is neither copied once per chunk nor kept as chunks beside its joined
        # bytes: those took its map four times its length).
        pending = bytearray()
        # The file's first bytes, read apart from the first chunk so that a whole BOM is found whatever the chunk
        # size; not a BOM, they start the first chunk (not ``pending``, which holds no newline: a first line ending
        # within them was counted into the next one, which then failed ``max_line_bytes`` named at byte 0).
        head = b""
        if split.start == 0:
            # A byte order mark is no part of the first line.
            try:
                head = file.read(len(UTF8_BOM))
            except DECOMPRESSION_ERRORS as error:
                raise _read_error(split.path, position, error) from error
            if head == UTF8_BOM:
                position = len(UTF8_BOM)
                head = b""
        end = split.end if split.end >= 0 else None
        if limit is not None:
            limit.position = position
        while True:
            if limit is not None and end is not None:
                end = limit.end
            if end is not None and position >= end:
                break
            try:
                chunk = file.read(CHUNK_BYTES)
            except DECOMPRESSION_ERRORS as error:  # a truncated or corrupt compressed file, or a failing disk
                raise _read_error(split.path, position, error) from error
            if head:  # (the file's first chunk)
                chunk, head = head + chunk, b""
                if _starts_a_tar_archive(chunk):
                    raise _tar_archive(split.path)
                # (Not for an mrjob job's bytes kept as they are: its protocols read them, as under mrjob.)
                if fallback_encoding is None and (wide := _wide_text(chunk)) is not None:
                    raise _wide_text_error(split.path, *wide)
            if not chunk:
                if end is not None and position + len(pending) < end:
                    raise _shrunk(split, os.fstat(file.fileno()).st_size)
                if pending:  # the last line, without a newline
                    last, read = bytes(pending), len(pending)
                    del pending  # (its bytes are in ``last``: not held twice while the line is mapped)
                    if len(last) > max_line_bytes:
                        raise _line_too_long(split.path, position, max_line_bytes)
                    if limit is not None:
                        limit.position = position + read  # (no line starts after it)
                    yield _decoded_lines(last, split.path, position, end, on_bad, fallback_encoding)
                _check_unchanged(split, file)
                return
            cut = chunk.rfind(b"\n")
            if cut < 0:
                pending += chunk
                if len(pending) > max_line_bytes:
                    raise _line_too_long(split.path, position, max_line_bytes)
                continue
            release = len(pending) >= CHUNK_BYTES  # (a line longer than a chunk ends in this one: see below)
            body = b"".join((pending, chunk[:cut])) if pending else chunk[:cut]
            if len(body) > max_line_bytes:  # (never with the default limit, which is larger than a chunk)
                _check_line_lengths(body, split.path, position, max_line_bytes)
            pending = bytearray(chunk[cut + 1 :])  # (a new one: the old one's memory goes back at once)
            size, has_cr = len(body), b"\r" in body
            # Bytes holding a line longer than a chunk are let go as soon as they are decoded or split: that line is
            # then held twice at most (its bytes and text, then its text and the line split from it), not three
            # times. (Not other chunks': freeing them early made reading a tenth slower.)
            # The byte offsets are computed in bulk by C loops (a Python statement per line costs about a tenth of
            # a word count's map): each line starts where the one before started plus its length in bytes plus the
            # newline.
            try:
                if body.isascii():  # characters are bytes: one decode, one split
                    text = body.decode("ascii")
                    if release:
                        body = b""
                    lines = text.split("\n")
                    del text
                    lengths = map(len, lines)
                else:
                    # The bytes split (their lengths are the offsets) and each line decoded: cheaper than decoding
                    # the chunk, splitting the text and the bytes both, and each line is made in its narrowest form
                    # (a slice of a wider text is narrowed character by character).
                    raw_lines = body.split(b"\n")
                    if release:
                        body = b""
                    lines = list(map(bytes.decode, raw_lines))
                    lengths = map(len, raw_lines)
            except UnicodeDecodeError:
                # The rare chunk with undecodable lines: line by line, to name (or skip) the bad ones.
                if release:
                    body = b"\n".join(raw_lines)
                lines_of_chunk = _decoded_lines(body, split.path, position, end, on_bad, fallback_encoding)
                position += size + 1
                if limit is not None:
                    limit.position = min(position, end) if end is not None else position
                yield lines_of_chunk
                continue  # (the loop ends here if the split does)
            starts = accumulate(map(add, lengths, repeat(1)), initial=position)
            if has_cr:  # (the lengths above are of the lines as read, with their \r)
                lines = [line[:-1] if line.endswith("\r") else line for line in lines]
            position += size + 1  # where the first line after this chunk's lines starts
            if limit is not None:
                yield from _batches_within(lines, list(starts), limit)
                continue
            if end is not None and position >= end:
                # The split ends among these lines: only those that start before ``end`` are its own.
                offsets = list(starts)
                yield zip(offsets[: bisect_left(offsets, end)], lines, strict=False)
                _check_unchanged(split, file)
                return
            yield zip(starts, lines, strict=False)  # starts has one more: the next chunk's first line
        _check_unchanged(split, file)  # (ended by a chunk of undecodable lines)


LIMITED_BATCH_LINES = 256
"""Lines handed out at a time by a reader with a :class:`ReadLimit`: what it holds that a cut cannot give away (a
chunk of a map whose user code takes a millisecond a line would be seconds)."""


def _batches_within(lines: list[str], offsets: list[int], limit: ReadLimit) -> Iterator[Iterable[tuple[int, str]]]:
    """``lines`` in batches of at most ``LIMITED_BATCH_LINES``, each up to ``limit.end`` as it is when the batch is
    made, keeping ``limit.position`` at the first line not handed out (``offsets[i]`` is where ``lines[i]``
    starts, and ``offsets[len(lines)]`` where the line after them does)."""
    count = len(lines)
    done = 0
    while done < count:
        upto = min(count, done + LIMITED_BATCH_LINES)
        stop = bisect_left(offsets, limit.end, done, upto)
        limit.position = offsets[stop]
        yield zip(offsets[done:stop], lines[done:stop], strict=True)
        if stop < upto:
            return  # (the reader sees it has reached the end: position >= end)
        done = upto
    limit.position = offsets[count]


def _check_unchanged(split: Split, file: IO[bytes]) -> None:
    """Raise :class:`InputError` if the file open as ``file`` is not the version ``split`` was cut from: checked
    where a split is opened and where it has been read, so a file rewritten before or while it is read (at the same
    size, or longer, when :func:`_shrunk` would see nothing) fails the map instead of putting lines of two versions
    in the output. A plain file appended to is read up to its size when the job started, as before; one replaced
    by a rename while it is read is read whole from the open (old) version."""
    was = split.stamp
    if was is None:
        return
    now = FileStamp.of(file.fileno())
    if was.identifies(now):
        return
    if split.end >= 0 and now.size < split.end:
        raise _shrunk(split, now.size)
    if now.inode != was.inode:
        what = "replaced by another file"
    elif now.size > was.size and split.length >= 0 and _tail_crc(file.fileno(), was.size) == was.tail:
        return  # appended to: the bytes the job reads are as they were
    elif now.size != was.size:
        what = f"rewritten ({was.size:,} bytes then, {now.size:,} now, and not by an append)"
    else:
        what = f"rewritten or touched (same size, {was.size:,} bytes, modified since)"
    raise InputError(
        f"input file {split.path} changed while the job ran: it was {what} after the job cut it into splits, so "
        f"its split {split.describe()} would mix two versions of it in the output; run the job again once it no "
        "longer changes (or on a copy of it)"
    )


def _shrunk(split: Split, size: int) -> InputError:
    """The error for a file of ``size`` bytes that ends before the end of ``split``: it was cut into splits at a
    larger size, so it was truncated or rewritten after the job started, and its lines past ``size`` (or all of
    them, if rewritten) would be missing from the output without a word."""
    return InputError(
        f"input file {split.path} is now {size:,} bytes, and its split {split.describe()} ends at byte "
        f"{split.end:,}: it was truncated or rewritten while the job ran; run the job again once it no longer changes"
    )


def _check_line_lengths(body: bytes, path: str, position: int, max_line_bytes: int) -> None:
    """Raise :func:`_line_too_long` for the first line of ``body`` (starting at byte ``position``) longer than
    ``max_line_bytes``."""
    for line in body.split(b"\n"):
        if len(line) > max_line_bytes:
            raise _line_too_long(path, position, max_line_bytes)
        position += len(line) + 1


def _line_too_long(path: str, position: int, max_line_bytes: int) -> InputError:
    return InputError(
        f"input file {path}: the line at byte offset {position} is longer than {max_line_bytes:,} bytes; "
        "raise --max-line-bytes if that is intended"
    )


def _starts_with_bom(file: IO[bytes]) -> bool:
    """Whether ``file`` starts with :data:`UTF8_BOM`; it is left positioned right after the BOM if so."""
    file.seek(0)
    return file.read(len(UTF8_BOM)) == UTF8_BOM


def skip_line(file: IO[bytes]) -> int:
    """Read past the next newline (or to the end) in chunks, keeping none of it; return the bytes read."""
    skipped = 0
    while True:
        chunk = file.read(CHUNK_BYTES)
        if not chunk:
            return skipped
        cut = chunk.find(b"\n")
        if cut >= 0:
            file.seek(cut + 1 - len(chunk), os.SEEK_CUR)
            return skipped + cut + 1
        skipped += len(chunk)


KEEP_BYTES = "surrogateescape"
"""A ``fallback_encoding`` that keeps every byte of a line that is not UTF-8: it is decoded with UTF-8's
``surrogateescape`` error handler, so ``line.encode("utf-8", "surrogateescape")`` gives its bytes back (an mrjob
job's INPUT_PROTOCOL reads the bytes, ``hop.mrjob_codec.InputEdge``)."""


def _decoded_lines(
    body: bytes,
    path: str,
    position: int,
    end: int | None,
    on_bad: BadLine | None,
    fallback_encoding: str | None = None,
) -> Iterator[tuple[int, str]]:
    """The lines of ``body`` (starting at byte ``position``) that start before ``end``, decoded one by one; an
    undecodable one is decoded with ``fallback_encoding``, or raises :class:`InputError`, or goes to ``on_bad`` and
    is left out."""
    for raw in body.split(b"\n"):
        if end is not None and position >= end:
            return
        try:
            line: str | None = _decode(raw, path, position)
        except InputError as error:
            if fallback_encoding == KEEP_BYTES:
                line = raw.decode("utf-8", KEEP_BYTES)
            elif fallback_encoding is not None:
                line = raw.decode(fallback_encoding)
            elif on_bad is None or not isinstance(error, BadRecordError):  # (compressed data: not a bad line)
                raise _undecodable(path, position, error) from None
            else:
                # Its bytes that are not UTF-8 shown as such (\xff), as an mrjob job's are: the listing's record is
                # the line to fix and feed again, which U+FFFD for each such byte did not tell.
                on_bad(position, raw.decode("utf-8", "backslashreplace"), str(error))
                line = None
        if line is not None:
            yield position, line[:-1] if line.endswith("\r") else line
        position += len(raw) + 1


_COMPRESSED_DATA = (
    (re.compile(rb"\x1f\x8b\x08"), ".gz"),
    # (the stream header, then a block's magic, or an empty stream's end: text may well start with "BZh")
    (re.compile(rb"BZh[1-9](\x31\x41\x59\x26\x53\x59|\x17\x72\x45\x38\x50\x90)"), ".bz2"),
    (re.compile(rb"\xfd7zXZ\x00"), ".xz"),
    (re.compile(rb"\x28\xb5\x2f\xfd|[\x50-\x5f]\x2a\x4d\x18"), ".zst"),  # (a frame, or a skippable one)
    (re.compile(rb"PK(\x03\x04|\x05\x06|\x07\x08)"), ".zip"),  # (a file, an empty archive, a spanned one)
    (re.compile(rb"7z\xbc\xaf\x27\x1c"), ".7z"),
    (re.compile(rb"\x04\x22\x4d\x18|\x02\x21\x4c\x18"), ".lz4"),  # (a frame, or the legacy format)
    (re.compile(rb"\x1f\x9d"), ".z"),
    (re.compile(rb"\xff\x06\x00\x00sNaPpY"), ".snappy"),  # (the framing format's; Hadoop's has none)
)
"""Compressed data by its first bytes: the suffix of its format, in :data:`COMPRESSIONS` (read decompressed) or
:data:`UNREAD_COMPRESSION` (not read)."""


def _data_format(head: bytes) -> str | None:
    """The suffix of the compressed format whose data starts with ``head`` (:data:`_COMPRESSED_DATA`), or None."""
    return next((suffix for magic, suffix in _COMPRESSED_DATA if magic.match(head)), None)


def _format_name(suffix: str) -> str:
    """What a compressed format of :data:`_COMPRESSED_DATA` is called: ``gzip``, ``Zstandard``..."""
    return COMPRESSIONS[suffix][1] if suffix in COMPRESSIONS else UNREAD_COMPRESSION[suffix][0]


def _compressed_data(path: str) -> InputError | None:
    """For a file read as text whose first bytes are compressed data's (a ``.gz`` saved as ``.txt``), the error
    saying so (re-encoding, which the not-UTF-8 error said, would not mend it; skipping its undecodable lines read
    the others, compressed bytes, as records); None for another file, or one that cannot be read."""
    try:
        with open(path, "rb") as file:
            head = file.read(10)
    except OSError:
        return None
    suffix = _data_format(head)
    if suffix is None:
        return None
    kind = _format_name(suffix)
    remedy = (
        f"rename it to end {suffix}, which hop reads decompressed"
        if suffix in COMPRESSIONS
        else "decompress it first (hop reads .gz, .bz2, .xz and .lzma files decompressed, not this)"
    )
    return InputError(
        f"input file {path} is not text: the file is {kind} data (its first bytes are {kind}'s), read as text "
        f"since its name does not say so: {remedy}"
    )


_TAR_MAGICS = (b"ustar\x00", b"ustar ")
"""What a tar archive's first header holds at byte 257: POSIX ustar's magic, or GNU tar's."""


def _starts_a_tar_archive(data: bytes) -> bool:
    """Whether ``data``, a file's first bytes, are a tar header: its magic, and the NUL bytes padding its fields
    (text holds none)."""
    return data[257:263].startswith(_TAR_MAGICS) and b"\x00" in data[:257]


def _tar_archive(path: str) -> InputError:
    """The error for a tar archive read as text (``logs.tar``, or ``logs.tar.gz``, decompressed): its headers are
    ASCII and NUL bytes, which are UTF-8, so its file names, modes and padding were read as records beside the
    files' lines, and the job succeeded on them, even without ``--skip-bad-records``."""
    return InputError(
        f"input file {path} is a tar archive (it starts with a tar header): read as text, its headers would be "
        f"records too; extract it (tar xf {path}) and read the files it holds"
    )


UTF16_SAMPLE_BYTES = 4096
"""How much of a file's start tells UTF-16 text without a byte order mark (:func:`_wide_text`)."""


_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
"""Byte order marks of UTF-16 and UTF-32 text, longest first (UTF-32LE's starts with UTF-16LE's)."""


def _wide_text(data: bytes) -> tuple[str, bool] | None:
    """The encoding of ``data``, a file's first bytes, when they are UTF-16 or UTF-32 text, and whether it was
    told by a byte order mark: ``("UTF-16", True)``; or, without one, ``("UTF-16LE", False)`` or
    ``("UTF-16BE", False)`` where NUL is at most of its odd (little-endian) or even (big-endian) positions and at
    few of the others, as Latin text so encoded is; else None. Text without the mark is valid UTF-8 (NUL is a
    character), so it was read without an error, each record a string of NULs between its letters."""
    for mark, encoding in _WIDE_BOMS:
        if data.startswith(mark):
            return encoding, True
    sample = data[:UTF16_SAMPLE_BYTES]
    if len(sample) < 8:
        return None
    pairs = len(sample) // 2
    even, odd = sample[0 : 2 * pairs : 2].count(0), sample[1 : 2 * pairs : 2].count(0)
    if odd >= 0.6 * pairs and even <= 0.05 * pairs:
        return "UTF-16LE", False
    if even >= 0.6 * pairs and odd <= 0.05 * pairs:
        return "UTF-16BE", False
    return None


def _wide_text_error(path: str, encoding: str, marked: bool) -> InputError:
    told = (
        f"it starts with a {encoding} byte order mark"
        if marked
        else "without a byte order mark: NUL bytes between its letters, which would be read as NUL characters"
    )
    return InputError(
        f"input file {path} is {encoding} text ({told}): hop reads UTF-8; re-encode it (iconv -f {encoding} -t "
        f"UTF-8 {path} > FILE) and read that"
    )


def _decode(raw: bytes, path: str, position: int) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        compressed = _compressed_data(path) if _compression(path) is None else None
        if compressed is not None:
            raise compressed from None
        # NUL bytes are no UTF-8 text's: the file is binary (an image, an archive, a build output among the logs),
        # which re-encoding, all the error said, would not mend, or UTF-16 text, which it would.
        remedy = (
            "it holds NUL bytes: if it is binary, leave it out of the inputs (in an input directory, a name starting "
            "with _ is left out); if it is UTF-16 text, re-encode it as UTF-8"
            if b"\0" in raw
            else "re-encode the file as UTF-8"
        )
        raise BadRecordError(
            f"input file {path}: line at byte offset {position} is not valid UTF-8 "
            f"(byte {position + error.start}: {error.reason}); {remedy}"
        ) from None
    return text


def iter_records(
    split: Split,
    input_format: str,
    max_line_bytes: int = MAX_LINE_BYTES,
    on_bad: BadLine | None = None,
    fallback_encoding: str | None = None,
    read_line: list[tuple[int, str]] | None = None,
    limit: ReadLimit | None = None,
) -> Iterator[tuple[Any, Any]]:
    """Yield the records of a split in the given format (see the module docstring); lines that cannot be decoded
    (text lines are decoded with ``fallback_encoding`` then, if given) or parsed raise :class:`InputError`, or go
    to ``on_bad`` and are left out. ``read_line``, if given, holds as its one item the byte offset and the text of
    the line of the record yielded last, in a format that parses lines (a text record is its line and offset): what
    a record skipped as bad is listed as, so it can be fixed and read again. ``limit``: see :func:`iter_lines`."""
    if input_format == "text":
        # Not wrapped: one generator less per record.
        return iter_lines(split, max_line_bytes, on_bad, fallback_encoding, limit)
    return _iter_parsed_records(split, input_format, max_line_bytes, on_bad, read_line, limit)


def _iter_parsed_records(
    split: Split,
    input_format: str,
    max_line_bytes: int,
    on_bad: BadLine | None,
    read_line: list[tuple[int, str]] | None = None,
    limit: ReadLimit | None = None,
) -> Iterator[tuple[Any, Any]]:
    # Chosen once per split, not per record: the parser, and what makes a line blank (no record) in the format.
    parsers: dict[str, tuple[Callable[[str, str, int], tuple[Any, Any]], Callable[[str], Any] | None]] = {
        "jsonl": (_jsonl_record, _json_content),
        "csv": (_csv_record, str.__str__),  # only the empty line is blank
        "output": (parse_output_line, None),
    }
    if input_format not in parsers:
        raise ValueError(f"unknown input format {input_format!r}; use text, jsonl, csv or output")
    parse, content = parsers[input_format]
    path = split.path
    for offset, line in iter_lines(split, max_line_bytes, on_bad, limit=limit):
        if content is not None and not content(line):
            continue  # blank lines are no records
        try:
            record = parse(line, path, offset)
        except InputError as error:
            if on_bad is None:
                raise
            on_bad(offset, line, str(error))
            continue
        if read_line is not None:
            read_line[:] = [(offset, line)]
        yield record


JSON_WHITESPACE = " \t\r\n"
"""The white space JSON allows around a value: a line of nothing else is blank (no record). Not ``str.strip``'s,
which also takes a no-break space, U+2028 or a control character such as 0x1C: a line of those is not JSON, a bad
record (it was left out as blank, without a word)."""


_json_content: Callable[[str], str] = operator.methodcaller("strip", JSON_WHITESPACE)
"""What a jsonl line holds besides JSON's white space: empty for a blank line (called per line: no Python frame)."""


def _jsonl_record(line: str, path: str, offset: int) -> tuple[int, Any]:
    return offset, _parse_json(line, path, offset)


def _csv_record(line: str, path: str, offset: int) -> tuple[int, list[str]]:
    return offset, _parse_csv(line, path, offset)


OUTPUT_LINES = "input format 'output' reads the part files a hop job wrote, json(key) TAB json(value) per line"
"""What a line that :func:`parse_output_line` refuses should have been (the end of its error)."""


def parse_output_line(line: str, path: str, offset: int, *, numbered: bool = False) -> tuple[Any, Any]:
    """One line of a hop output file, ``json(key) TAB json(value)``, as a pair (JSON arrays as tuples).

    ``offset`` is the line's byte offset in ``path``, or with ``numbered`` its number (from 1) in ``path``, which
    then names where the lines come from (a previous step's output on Spark). A line that is not such a pair raises
    :class:`InputError` naming the file, the offset or line, what is wrong and what the format reads."""
    key_text, tab, value_text = line.partition("\t")
    if not tab:
        problem = "has no TAB"
    else:
        part = "key"
        try:
            key = freeze_json(json.loads(key_text))
            part = "value"
            return key, freeze_json(json.loads(value_text))
        except (ValueError, RecursionError) as error:
            problem = f"has a {part} that {_json_problem(error)}"
    where = f"{path}: line {offset}" if numbered else f"input file {path}: line at byte offset {offset}"
    raise BadRecordError(f"{where} {problem}: {OUTPUT_LINES}")


def _parse_json(text: str, path: str, offset: int) -> Any:
    try:
        return freeze_json(json.loads(text))
    except (ValueError, RecursionError) as error:
        raise BadRecordError(f"input file {path}: line at byte offset {offset} {_json_problem(error)}") from None


def _json_problem(error: ValueError | RecursionError) -> str:
    """Why ``json.loads`` refused a text, for an error message."""
    if isinstance(error, json.JSONDecodeError):
        return f"is not JSON: {error.msg}"
    return f"cannot be read as JSON: {error}"  # an int of more than 4,300 digits, arrays nested too deep


def freeze_json(value: Any) -> Any:
    """``value`` (parsed JSON) with its arrays as tuples at any depth, inside objects too: as keys and values come
    out of hop's shuffle, so keys read back from an output file compare equal (and hash) as the job's own did, and an
    array taken out of a record can be a key. Objects stay dicts (updated in place)."""
    if isinstance(value, list):
        return tuple(freeze_json(item) for item in value)
    if isinstance(value, dict):
        for key, item in value.items():  # in place: a flat record (the usual) costs no new dict
            if isinstance(item, (list, dict)):
                value[key] = freeze_json(item)
    return value


def _parse_csv(line: str, path: str, offset: int) -> list[str]:
    try:
        rows = list(csv.reader([line], strict=True))
    except csv.Error as error:
        # Splits are cut at newlines, so a quoted field cannot hold one: say so rather than leave the user to guess.
        spans = " (a quoted field spanning lines? each CSV row must be one line)" if line.count('"') % 2 else ""
        raise BadRecordError(f"input file {path}: CSV row at byte offset {offset}: {error}{spans}") from None
    return rows[0] if rows else []
