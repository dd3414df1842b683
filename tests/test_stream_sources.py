"""Stream sources on real files and sockets: tail (appends, new files, partial lines, rotation, resume), zmq PULL
and SUB, tcp, replay (rate, end, resume) and bad URLs. Every wait is bounded."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from hop.stream.sources import (
    Source,
    SourceError,
    SourceRecord,
    TailSource,
    TcpSource,
    ZmqSource,
    check_source,
    open_source,
    source_paths,
)
from shuffle import codec
from tests.conftest import ROOT, hop


@pytest.fixture()
def sources() -> Iterator[list[Source]]:
    """Sources to close after the test, whatever happens."""
    opened: list[Source] = []
    yield opened
    for source in opened:
        source.close()


def opened(sources: list[Source], url: str) -> Source:
    source = open_source(url)
    sources.append(source)
    return source


def collect(source: Source, count: int, timeout: float = 5.0, batch: int = 1000) -> list[SourceRecord]:
    """Poll until ``count`` records came or ``timeout`` passed."""
    records: list[SourceRecord] = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        records += source.poll(min(batch, count - len(records)), 0.05)
    return records


def values(records: list[SourceRecord]) -> list[Any]:
    return [record.value for record in records]


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as file:
        file.write(text)


@contextlib.contextmanager
def connected_push(source: Source) -> Iterator[zmq.Socket[bytes]]:
    """A PUSH socket connected to a ``zmq:`` source's endpoint, closed without lingering when the block ends."""
    assert isinstance(source, ZmqSource)
    push: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUSH)
    try:
        push.setsockopt(zmq.LINGER, 0)
        push.connect(source.endpoint)
        yield push
    finally:
        push.close(linger=0)


# tail


def test_tail_reads_appended_lines_and_new_files(tmp_path: Path, sources: list[Source]) -> None:
    (tmp_path / "a.log").write_text("one\ntwo\n")
    (tmp_path / ".hidden").write_text("not me\n")
    (tmp_path / "_SUCCESS").write_text("not me either\n")
    source = opened(sources, f"tail:{tmp_path}")
    assert source.replayable and not source.exhausted
    first = collect(source, 2)
    assert values(first) == ["one", "two"]
    assert [r.nbytes for r in first] == [4, 4] and abs(first[0].arrival - time.time()) < 5
    append(tmp_path / "a.log", "three\r\n")
    (tmp_path / "b.log").write_text("b1\n")
    assert values(collect(source, 2)) == ["three", "b1"]
    assert source.poll(10, 0.1) == []


def test_tail_of_a_file_whose_name_is_not_utf8_takes_a_position_and_names_it(
    tmp_path: Path, sources: list[Source]
) -> None:
    """A file named in Latin-1 (``caf\xe9.log``) in a tailed directory: its name reaches Python as surrogates, which
    msgpack cannot encode, and the map's first checkpoint failed (``surrogates not allowed``), and with it the job.
    Its position packs, a bad record of it names the file with the byte as ``\\xe9``, and a source resumed from
    the position reads on past what was read."""
    with open(os.fsencode(tmp_path) + b"/caf\xe9.log", "wb") as file:
        file.write(b"one\n\xff\n")
    source = opened(sources, f"tail:{tmp_path}")
    good, bad = collect(source, 2)
    assert good.value == "one" and bad.value is None
    assert source.where(bad) == f"tail source tail:{tmp_path}: the line at byte offset 4 of caf\\xe9.log"
    position = codec.unpackb(codec.packb(source.position()))
    with open(os.fsencode(tmp_path) + b"/caf\xe9.log", "ab") as file:
        file.write(b"two\n")
    resumed = opened(sources, f"tail:{tmp_path}")
    resumed.seek(position)
    assert values(collect(resumed, 1)) == ["two"]


def test_tail_files_are_read_in_mtime_order(tmp_path: Path, sources: list[Source]) -> None:
    for name, mtime in (("z", 100), ("a", 300), ("m", 200)):
        (tmp_path / name).write_text(f"{name}\n")
        os.utime(tmp_path / name, (mtime, mtime))
    assert values(collect(opened(sources, f"tail:{tmp_path}"), 3)) == ["z", "m", "a"]


def test_tail_partial_line_waits_for_its_newline(tmp_path: Path, sources: list[Source]) -> None:
    log = tmp_path / "app.log"
    log.write_text("whole\nhal")
    source = opened(sources, f"tail:{tmp_path}")
    assert values(collect(source, 1)) == ["whole"]
    assert source.poll(10, 0.1) == []
    append(log, "f and")
    assert source.poll(10, 0.1) == []
    append(log, " more\nnext\n")
    records = collect(source, 2)
    assert values(records) == ["half and more", "next"] and records[0].nbytes == len("half and more\n")


def test_poll_returns_within_its_timeout(tmp_path: Path, sources: list[Source]) -> None:
    (tmp_path / "data.txt").write_text("")
    for url in (f"tail:{tmp_path}", "zmq:tcp://127.0.0.1:*", "tcp:127.0.0.1:0", f"replay:{tmp_path}/data.txt?loop=1"):
        source = opened(sources, url)
        # The upper bounds leave room for a loaded machine (another test process beside this one) while still
        # failing a poll that waits a whole second, or for ever, past its timeout.
        started = time.monotonic()
        assert source.poll(10, 0.2) == []
        assert 0.15 < time.monotonic() - started < 1.0, url
        started = time.monotonic()
        assert source.poll(10, 0) == [] and source.poll(0, 1.0) == []
        assert time.monotonic() - started < 0.5, url  # the 1 s of poll(0, 1.0) is not waited


@pytest.mark.parametrize("rotate_to", ["app.log.1", "../moved.log"])
def test_tail_rotation_by_rename_loses_and_duplicates_nothing(
    tmp_path: Path, sources: list[Source], rotate_to: str
) -> None:
    directory = tmp_path / "logs"
    directory.mkdir()
    source = opened(sources, f"tail:{directory}")
    writer = open(directory / "app.log", "a", encoding="utf-8")  # noqa: SIM115 -- reopened at the rotation
    received: list[SourceRecord] = []
    try:
        for i in range(300):
            writer.write(f"line {i}\n")
            writer.flush()
            if i == 150:  # rotate: the writer keeps writing to the old file a little, then reopens app.log
                os.rename(directory / "app.log", directory / rotate_to)
            if i == 160:
                writer.close()
                writer = open(directory / "app.log", "a", encoding="utf-8")  # noqa: SIM115
            if i % 20 == 0:
                received += source.poll(7, 0.01)  # small batches: the rotation happens with lines still unread
    finally:
        writer.close()
    received += collect(source, 300 - len(received))
    assert values(received) == [f"line {i}" for i in range(300)]
    assert source.poll(100, 0.1) == []


def test_tail_file_moved_out_is_finished_then_closed(
    tmp_path: Path, sources: list[Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "logs"
    directory.mkdir()
    (directory / "app.log").write_text("a\nb\n")
    source = opened(sources, f"tail:{directory}")
    assert values(collect(source, 1, batch=1)) == ["a"]
    os.rename(directory / "app.log", tmp_path / "old.log")
    append(tmp_path / "old.log", "c\nunfinished")
    assert values(collect(source, 2)) == ["b", "c"]
    # Once gone for GONE_GRACE seconds without new bytes, its last line ends with it and the file is closed.
    monkeypatch.setattr("hop.stream.sources.tail.GONE_GRACE", 0.2)
    assert values(collect(source, 1)) == ["unfinished"]
    assert source.position() == {"files": []}


def test_tail_directory_removed_while_read_is_waited_for_as_tail_f_does(
    tmp_path: Path, sources: list[Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tailed directory removed (a log directory recreated by a deploy) failed the map, and its retries, which found
    no directory, the job: its files are read to their end, and it is read again once it is back."""
    directory = tmp_path / "logs"
    directory.mkdir()
    (directory / "app.log").write_text("a\nb\n")
    source = opened(sources, f"tail:{directory}")
    assert values(collect(source, 1, batch=1)) == ["a"]
    with open(directory / "app.log", "a") as writer:  # (its writer still holds it, as a logging process would)
        shutil.rmtree(directory)
        writer.write("c\n")
    assert values(collect(source, 2)) == ["b", "c"]
    monkeypatch.setattr("hop.stream.sources.tail.GONE_GRACE", 0.2)
    assert values(collect(source, 1, timeout=1.0)) == [] and source.position() == {"files": []}  # (closed once gone)
    directory.mkdir()
    (directory / "app.log").write_text("d\n")
    assert values(collect(source, 1)) == ["d"]


def test_tail_file_truncated_in_place_is_read_from_its_start(tmp_path: Path, sources: list[Source]) -> None:
    log = tmp_path / "app.log"
    log.write_text("first\nsecond\n")
    source = opened(sources, f"tail:{tmp_path}")
    assert values(collect(source, 2)) == ["first", "second"]
    log.write_text("third\n")  # copytruncate rotation: truncated, then written again
    assert values(collect(source, 1)) == ["third"]


def test_tail_truncation_returns_the_lines_read_before_it(tmp_path: Path, sources: list[Source]) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"old {i}\n" for i in range(50)) + "no newline yet")
    source = opened(sources, f"tail:{tmp_path}")
    first = values(collect(source, 5, batch=5))  # the rest of the file is read, not yet returned
    log.write_text("new 0\n")  # truncated in place, written again, with none of the old lines returned
    rest = values(collect(source, 47))
    assert first + rest == [f"old {i}" for i in range(50)] + ["no newline yet", "new 0"]
    assert source.poll(10, 0.1) == []


def copytruncate(log: Path, copy: Path) -> None:
    """logrotate's copytruncate: copy the file, then truncate it in place (the writer keeps its descriptor)."""
    copy.write_bytes(log.read_bytes())
    os.truncate(log, 0)


@pytest.mark.parametrize("unread", [0, 120])
def test_tail_copytruncate_rotation_reads_nothing_twice(tmp_path: Path, sources: list[Source], unread: int) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(200)))
    source = opened(sources, f"tail:{tmp_path}")
    got = values(collect(source, 200 - unread, batch=40))  # with unread: lines read into the buffer, not returned
    append(log, "".join(f"line {i}\n" for i in range(200, 230)))  # not read before the copy: only the copy has them
    copytruncate(log, tmp_path / "app.log.1")
    append(log, "line 230\n")
    got += values(collect(source, 31 + unread, timeout=5.0))
    assert got == [f"line {i}" for i in range(231)]
    assert source.poll(100, 0.1) == []
    names = sorted(entry["name"] for entry in source.position()["files"])
    assert names == ["app.log", "app.log.1"]
    append(tmp_path / "app.log", "line 231\n")  # both go on being tailed
    append(tmp_path / "app.log.1", "late\n")
    assert sorted(values(collect(source, 2))) == ["late", "line 231"]


@pytest.mark.parametrize("resumed", [False, True])
def test_tail_last_line_of_a_copytruncate_copy_is_returned_at_the_rotation(
    tmp_path: Path, sources: list[Source], resumed: bool
) -> None:
    """A partial line read from the live file waits for its newline; when the file is rotated by copy and
    truncation, the copy is complete and its last line a whole one, returned at once (it once waited until the copy
    left the directory: a day, with logrotate), also by a source resumed from a position taken before it was."""
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(20)) + "cut short")
    source = opened(sources, f"tail:{tmp_path}")
    got = values(collect(source, 20))
    assert source.poll(100, 0.1) == []  # no newline yet: not a record
    append(log, "".join(f" still {i}\n" for i in range(20, 30)) + "cut short")
    got += values(collect(source, 1, batch=1))  # the rest is read, not returned, when the file is rotated
    copytruncate(log, tmp_path / "app.log.1")
    append(log, "line 30\n")
    got += values(collect(source, 1, batch=1))  # from the copy, which holds the rest, adopted
    if resumed:
        position = msgpack.unpackb(msgpack.packb(source.position()), raw=False)
        source.close()
        source = opened(sources, f"tail:{tmp_path}")
        source.seek(position)
    got += values(collect(source, 10, timeout=3.0))
    expected = [f"line {i}" for i in range(20)] + ["cut short still 20"] + [f" still {i}" for i in range(21, 30)]
    assert got == [*expected, "cut short", "line 30"]
    assert source.poll(100, 0.1) == []


def test_tail_copy_seen_before_the_truncation_waits_for_it(tmp_path: Path, sources: list[Source]) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    source = opened(sources, f"tail:{tmp_path}")
    got = values(collect(source, 100))
    (tmp_path / "app.log.1").write_bytes(log.read_bytes())
    assert source.poll(100, 0.3) == []  # held: a copy of what was read, its original not truncated yet
    append(log, "line 100\n")  # written between the copy and the truncation, read from the original
    got += values(collect(source, 1))
    os.truncate(log, 0)
    append(log, "line 101\n")
    got += values(collect(source, 1))
    assert got == [f"line {i}" for i in range(102)]
    assert source.poll(100, 0.1) == []


def test_tail_a_plain_copy_is_read_as_a_file_of_its_own(
    tmp_path: Path, sources: list[Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("hop.stream.sources.tail.GONE_GRACE", 1.0)
    (tmp_path / "a.log").write_text("header\nrow 1\n")
    source = opened(sources, f"tail:{tmp_path}")
    assert values(collect(source, 2)) == ["header", "row 1"]
    (tmp_path / "b.log").write_text("header\nrow 1\n")  # the same bytes, but a.log is never truncated
    (tmp_path / "c.log").write_text("header\nrow 2\n")  # starts the same, then differs: read at once
    # Within half of GONE_GRACE, which b.log waits out (0.2 s left a loaded machine too little).
    assert values(collect(source, 2, timeout=0.5)) == ["header", "row 2"]
    assert values(collect(source, 2)) == ["header", "row 1"]  # after GONE_GRACE without a truncation of a.log


def test_tail_copy_written_slowly_is_not_read_again(
    tmp_path: Path, sources: list[Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("hop.stream.sources.tail.GONE_GRACE", 0.3)
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    source = opened(sources, f"tail:{tmp_path}")
    got = values(collect(source, 100))
    data = log.read_bytes()
    with open(tmp_path / "app.log.1", "wb") as copy:  # a copy taking longer than GONE_GRACE, growing all along
        for start in range(0, len(data), 100):
            copy.write(data[start : start + 100])
            copy.flush()
            got += values(source.poll(100, 0.1))
    os.truncate(log, 0)
    append(log, "line 100\n")
    got += values(collect(source, 1))
    assert got == [f"line {i}" for i in range(101)]
    assert source.poll(100, 0.4) == []


def test_tail_copy_checked_mid_line_then_truncated_is_not_read_again(tmp_path: Path, sources: list[Source]) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(10)) + "par")
    source = opened(sources, f"tail:{tmp_path}")
    got = values(collect(source, 10))
    (tmp_path / "app.log.1").write_bytes(log.read_bytes())  # the copy ends inside a line hop has read, not returned
    assert source.poll(100, 0.1) == []
    append(log, "tial\nline 10\n")  # after the copy: returned from the original, past the copy's end
    got += values(collect(source, 2))
    os.truncate(log, 0)
    append(log, "line 11\n")
    got += values(collect(source, 1))
    assert got == [f"line {i}" for i in range(10)] + ["partial", "line 10", "line 11"]
    assert source.poll(100, 0.1) == []


def test_tail_empty_copy_is_matched_once_it_fills(tmp_path: Path, sources: list[Source]) -> None:
    (tmp_path / "a.log").write_text("".join(f"a {i}\n" for i in range(5)))
    (tmp_path / "b.log").write_text("".join(f"b {i}\n" for i in range(5)))
    source = opened(sources, f"tail:{tmp_path}")
    got = values(collect(source, 10))
    (tmp_path / "b.log.1").touch()  # listed while still empty: it could be the copy of either file
    assert source.poll(100, 0.1) == []
    copytruncate(tmp_path / "b.log", tmp_path / "b.log.1")
    append(tmp_path / "b.log", "b 5\n")
    got += values(collect(source, 1))
    assert sorted(got) == sorted([f"a {i}" for i in range(5)] + [f"b {i}" for i in range(6)])
    assert source.poll(100, 0.1) == []


def test_tail_position_fingerprints_the_bytes_returned(tmp_path: Path, sources: list[Source]) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"old {i}\n" for i in range(10)))
    first = opened(sources, f"tail:{tmp_path}")
    collect(first, 10)
    with open(log, "r+b") as file:  # rewritten in place, longer, before the source noticed
        file.write(b"".join(b"new %d\n" % i for i in range(30)))
    position = first.position()
    source = opened(sources, f"tail:{tmp_path}")
    source.seek(position)
    assert values(collect(source, 30)) == [f"new {i}" for i in range(30)]


def test_tail_resume_across_a_copytruncate_reads_the_copy_on(tmp_path: Path, sources: list[Source]) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    first = opened(sources, f"tail:{tmp_path}")
    assert values(collect(first, 30, batch=30)) == [f"line {i}" for i in range(30)]
    position = msgpack.unpackb(msgpack.packb(first.position()), raw=False)
    first.close()
    copytruncate(log, tmp_path / "app.log.1")  # while the source is away
    append(log, "line 50\n")
    source = opened(sources, f"tail:{tmp_path}")
    source.seek(position)
    assert sorted(values(collect(source, 21))) == sorted(f"line {i}" for i in range(30, 51))
    assert source.poll(100, 0.1) == []


def test_tail_truncated_and_rewritten_past_the_read_position_is_read_from_its_start(
    tmp_path: Path, sources: list[Source]
) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"old {i}\n" for i in range(10)))
    source = opened(sources, f"tail:{tmp_path}")
    assert values(collect(source, 10)) == [f"old {i}" for i in range(10)]
    log.write_text("".join(f"new {i}\n" for i in range(30)))  # longer than before: the size alone does not tell
    assert values(collect(source, 30)) == [f"new {i}" for i in range(30)]
    assert source.poll(100, 0.1) == []


def test_tail_file_and_its_copy_in_one_listing_are_read_once(tmp_path: Path, sources: list[Source]) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    (tmp_path / "app.log.1").write_bytes(log.read_bytes())  # copied, not yet truncated, when the source starts
    source = opened(sources, f"tail:{tmp_path}")
    got = values(collect(source, 100))
    os.truncate(log, 0)
    append(log, "line 100\n")
    got += values(collect(source, 1))
    assert got == [f"line {i}" for i in range(101)]
    assert source.poll(100, 0.1) == []


def test_tail_new_files_are_not_compared_with_every_tracked_one(
    tmp_path: Path, sources: list[Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each new file's first bytes were compared with every tracked file's, read again from the file while that one
    was not read yet: 2,000 one-line files took 12 s (4 million reads) to be listed. Heads are indexed instead: the
    reads grow with the number of files, not with its square (counted, not timed)."""
    count = 300
    for i in range(count):
        (tmp_path / f"f{i:04d}.log").write_text(f"host {i} started\n")
    (tmp_path / "f0007.log.1").write_text("host 7 started\n")  # a copy among them still waits for a truncation
    reads = 0
    pread = os.pread

    def counted(fd: int, length: int, offset: int) -> bytes:
        nonlocal reads
        reads += 1
        return pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counted)
    source = opened(sources, f"tail:{tmp_path}")
    got = values(collect(source, count))
    assert sorted(got) == sorted(f"host {i} started" for i in range(count))
    assert reads < 10 * count, reads  # all pairs: count²/2 = 45,000
    assert source.poll(10, 0.1) == []  # the copy: held


def test_tail_idle_files_are_checked_less_and_less_often(
    tmp_path: Path, sources: list[Source], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tracked file was checked (fstat, pread, read) at every poll: 2,000 idle files took a third of a core.
    One that does not grow is checked less and less often (counted, not timed: 40 polls of 100 idle files)."""
    count = 100
    for i in range(count):
        (tmp_path / f"f{i:03d}.log").write_text(f"host {i} started\n")
    source = opened(sources, f"tail:{tmp_path}")
    assert len(collect(source, count)) == count
    checks = 0
    fstat = os.fstat

    def counted(fd: int) -> os.stat_result:
        nonlocal checks
        checks += 1
        return fstat(fd)

    monkeypatch.setattr(os, "fstat", counted)
    for _ in range(40):
        assert source.poll(10, 0.02) == []
    assert checks < 15 * count, checks  # at every poll: 40 each


def test_tail_a_long_idle_file_is_read_once_a_listing_sees_it_change(tmp_path: Path, sources: list[Source]) -> None:
    """A file that has not grown for long is checked seldom, but read at once when a listing sees its size or mtime
    change: new lines, and a copytruncate rotation (nothing read twice)."""
    (tmp_path / "app.log").write_text("".join(f"line {i}\n" for i in range(10)))
    (tmp_path / "other.log").write_text("other 0\n")
    source = opened(sources, f"tail:{tmp_path}")
    got = values(collect(source, 11))
    assert isinstance(source, TailSource)
    for f in source._files:  # as if idle for a minute: not checked again for a minute
        f.idle, f.due = 60.0, time.monotonic() + 60.0
    append(tmp_path / "other.log", "other 1\n")
    assert values(collect(source, 1, timeout=2.0)) == ["other 1"]
    for f in source._files:
        f.idle, f.due = 60.0, time.monotonic() + 60.0
    copytruncate(tmp_path / "app.log", tmp_path / "app.log.1")
    append(tmp_path / "app.log", "line 10\n")
    got += values(collect(source, 1, timeout=2.0))
    assert sorted(got) == sorted([f"line {i}" for i in range(11)] + ["other 0"])
    assert source.poll(10, 0.1) == []


def test_tail_glob_reads_only_matching_names(tmp_path: Path, sources: list[Source]) -> None:
    (tmp_path / "app.log").write_text("kept\n")
    (tmp_path / "app.log.1.gz").write_bytes(b"\x1f\x8b\x08\x00rotated and compressed\n")
    (tmp_path / "notes.txt").write_text("not a log\n")
    source = opened(sources, f"tail:{tmp_path}?glob=*.log")
    assert values(collect(source, 1)) == ["kept"]
    (tmp_path / "new.log").write_text("new\n")
    assert values(collect(source, 1)) == ["new"]
    assert source.poll(10, 0.1) == []


def test_a_plus_in_a_tail_glob_is_a_plus(tmp_path: Path, sources: list[Source]) -> None:
    """The options were parsed as a web form's, where + is a space: glob=web+api.log matched no file, and the
    source read nothing, saying nothing."""
    (tmp_path / "web+api.log").write_text("kept\n")
    (tmp_path / "other.log").write_text("not this\n")
    assert values(collect(opened(sources, f"tail:{tmp_path}?glob=web+api.log"), 1)) == ["kept"]


def test_a_tail_glob_naming_a_file_with_glob_characters_reads_that_file(tmp_path: Path, sources: list[Source]) -> None:
    """``tail:DIR?glob=NAME`` follows the one file NAME (docs/stream.md), but as a shell pattern ``a[1].log`` matched
    ``a1.log``, never ``a[1].log`` itself: the file was never read, and nothing said so. A name equal to the glob is
    now taken as well as the names it matches (``[[]`` escapes a ``[`` to name the one file alone)."""
    (tmp_path / "a[1].log").write_text("literal\n")
    (tmp_path / "a1.log").write_text("matched\n")
    (tmp_path / "b.log").write_text("neither\n")
    assert sorted(values(collect(opened(sources, f"tail:{tmp_path}?glob=a[1].log"), 2))) == ["literal", "matched"]
    assert values(collect(opened(sources, f"tail:{tmp_path}?glob=a[[]1].log"), 2, timeout=0.5)) == ["literal"]
    (tmp_path / "why?.log").write_text("question\n")
    assert values(collect(opened(sources, f"tail:{tmp_path}?glob=why?.log"), 2, timeout=0.5)) == ["question"]


def test_a_source_path_holding_a_question_mark_is_that_path_when_it_exists(
    tmp_path: Path, sources: list[Source]
) -> None:
    """The options of a URL follow its first ``?``, so ``tail:DIR`` of a directory named ``logs?1`` read ``logs``
    with options ``1`` (refused as no ``key=value``), and no URL could name that directory or a ``replay:`` file
    named so. A ``tail:`` or ``replay:`` path that exists with a ``?`` in it is now that path (options after the
    ``?`` that follows it), as a batch input that exists is that file whatever its glob characters; ``*`` and ``[``
    in a path were always taken as written."""
    folder = tmp_path / "logs?1"
    folder.mkdir()
    (folder / "a.log").write_text("in logs?1\n")
    (folder / "b.txt").write_text("b\n")
    assert values(collect(opened(sources, f"tail:{folder}"), 2, timeout=0.5)) == ["in logs?1", "b"]
    assert values(collect(opened(sources, f"tail:{folder}?glob=*.log"), 2, timeout=0.5)) == ["in logs?1"]
    played = folder / "data?.txt"
    played.write_text("one\ntwo\n")
    assert values(collect(opened(sources, f"replay:{played}"), 2)) == ["one", "two"]
    assert values(collect(opened(sources, f"replay:{played}?loop=1"), 4)) == ["one", "two", "one", "two"]
    assert source_paths([f"tail:{folder}?glob=*.log", f"replay:{played}?rate=5"]) == [str(folder), str(played)]
    # Where no such path exists, the options start at the first ? as before: a wrong option is named as such.
    with pytest.raises(SourceError, match=r"unknown option 'glop' for tail"):
        opened(sources, f"tail:{folder}?glop=*.log")
    with pytest.raises(SourceError, match=r"/missing does not exist"):
        opened(sources, f"tail:{tmp_path}/missing?glob=*.log")
    for star_or_bracket in ("logs*", "logs[1]"):
        (tmp_path / star_or_bracket).mkdir()
        (tmp_path / star_or_bracket / "c.log").write_text(f"in {star_or_bracket}\n")
        assert values(collect(opened(sources, f"tail:{tmp_path / star_or_bracket}"), 1)) == [f"in {star_or_bracket}"]


def test_tail_position_and_seek_resume_exactly_on_a_fresh_source(tmp_path: Path, sources: list[Source]) -> None:
    (tmp_path / "a.log").write_text("".join(f"a{i}\n" for i in range(10)))
    (tmp_path / "b.log").write_text("b0\nb1\npartial")
    os.utime(tmp_path / "b.log", (1, 1))  # read first
    first = open_source(f"tail:{tmp_path}")
    try:
        got = values(collect(first, 5, batch=5))
        position = msgpack.unpackb(msgpack.packb(first.position()), raw=False)  # what a checkpoint stores
    finally:
        first.close()
    assert got == ["b0", "b1", "a0", "a1", "a2"]
    append(tmp_path / "b.log", " done\n")
    append(tmp_path / "a.log", "a10\n")
    (tmp_path / "c.log").write_text("c0\n")  # appeared after the checkpoint: read from its start
    source = opened(sources, f"tail:{tmp_path}")
    source.seek(position)
    rest = values(collect(source, 10))
    assert sorted(rest) == sorted(["partial done"] + [f"a{i}" for i in range(3, 11)] + ["c0"])
    assert [v for v in rest if v.startswith("a")] == [f"a{i}" for i in range(3, 11)]
    assert source.poll(10, 0.1) == []


def test_tail_seek_ignores_an_offset_for_a_reused_inode(tmp_path: Path, sources: list[Source]) -> None:
    (tmp_path / "a.log").write_text("old 1\nold 2\n")
    first = opened(sources, f"tail:{tmp_path}")
    collect(first, 2)
    position = first.position()
    first.close()
    # The same inode with other content (rewritten in place): the fingerprint no longer matches.
    with open(tmp_path / "a.log", "r+b") as file:
        file.write(b"new 1\nnew 2\nnew 3\n")
    source = opened(sources, f"tail:{tmp_path}")
    source.seek(position)
    assert values(collect(source, 3)) == ["new 1", "new 2", "new 3"]


def bad_record_error(record: SourceRecord) -> str:
    """The error of a bad record (failing the test for a good one)."""
    assert record.value is None and record.error is not None, record
    return record.error


def test_tail_undecodable_line_is_a_bad_record_naming_file_and_offset(tmp_path: Path, sources: list[Source]) -> None:
    (tmp_path / "bad.txt").write_bytes(b"good\nbad \xff\xfe\nafter\n")
    source = opened(sources, f"tail:{tmp_path}")
    records = collect(source, 3)
    assert [r.value for r in records] == ["good", None, "after"]  # in its place, and the source goes on
    assert re.search(r"byte offset 5 of bad\.txt .*not valid UTF-8 \(its byte 4", bad_record_error(records[1]))
    assert records[1].nbytes == 7 and source.position()["files"][0]["offset"] == 18  # past it: not read again
    assert source.poll(10, 0.1) == []


def test_replay_undecodable_line_is_a_bad_record_and_resumes_past_it(tmp_path: Path, sources: list[Source]) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"one\n\xc3\x28\ntwo\n")
    source = opened(sources, f"replay:{path}")
    records = collect(source, 3)
    assert [r.value for r in records] == ["one", None, "two"] and source.exhausted
    assert re.search(r"line 2 \(byte offset 4\) of .*lines\.txt is not valid UTF-8", bad_record_error(records[1]))


@pytest.mark.parametrize("kind", ["tail", "replay"])
def test_a_byte_order_mark_starting_a_file_is_no_part_of_its_first_line(
    tmp_path: Path, sources: list[Source], kind: str
) -> None:
    """As in batch: a JSON-lines file saved with a BOM gave a first line that was no JSON (a bad record), a text
    file a first word that was not the word. Only at the start of the file: a BOM further on is the line's."""
    (tmp_path / "logs").mkdir()
    path = tmp_path / "logs" / "events.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"ts": 1}\n\xef\xbb\xbfsecond\n')
    source = opened(sources, f"tail:{path.parent}" if kind == "tail" else f"replay:{path}")
    records = collect(source, 2)
    assert values(records) == ['{"ts": 1}', "\ufeffsecond"]
    assert [(r.nbytes, r.offset) for r in records] == [(13, 0), (10, 13)]  # the mark's bytes are still counted


def places(records: list[SourceRecord]) -> list[tuple[str | None, int | None]]:
    return [(record.origin, record.offset) for record in records]


def test_tail_records_carry_their_file_and_byte_offset(tmp_path: Path, sources: list[Source]) -> None:
    """Every record says where it was (the stream map names it when the record turns out bad or its map raises):
    offsets count per file, across polls and across a truncation."""
    (tmp_path / "a.log").write_text("one\ntwo\n")
    os.utime(tmp_path / "a.log", (100, 100))
    (tmp_path / "b.log").write_text("b-one\nb-two\n")
    source = opened(sources, f"tail:{tmp_path}")
    records = collect(source, 4, batch=3)
    assert places(records) == [("a.log", 0), ("a.log", 4), ("b.log", 0), ("b.log", 6)]
    assert source.where(records[3]) == f"tail source tail:{tmp_path}: the line at byte offset 6 of b.log"
    append(tmp_path / "b.log", "b-three\n")
    assert places(collect(source, 1)) == [("b.log", 12)]
    (tmp_path / "a.log").write_text("new\n")  # truncated in place: read again from its start
    assert places(collect(source, 1)) == [("a.log", 0)]


def test_replay_records_carry_their_file_and_byte_offset(tmp_path: Path, sources: list[Source]) -> None:
    path = tmp_path / "lines.txt"
    path.write_text("one\ntwo\nthree")
    source = opened(sources, f"replay:{path}")
    records = collect(source, 3)
    assert places(records) == [(str(path), 0), (str(path), 4), (str(path), 8)]
    assert source.where(records[2]) == f"replay source replay:{path}: the line at byte offset 8 of {path}"


def test_tcp_records_carry_their_client_and_byte_offset(sources: list[Source]) -> None:
    source = opened(sources, "tcp:127.0.0.1:0")
    assert isinstance(source, TcpSource)
    with socket.create_connection(("127.0.0.1", source.port), timeout=5) as client:
        peer = f"127.0.0.1:{client.getsockname()[1]}"
        client.sendall(b"one\ntw")
        first = collect(source, 1)
        client.sendall(b"o\n\xff\n")
        records = first + collect(source, 2)
    assert places(records) == [(peer, 0), (peer, 4), (peer, 8)]
    assert source.where(records[1]) == f"tcp source {source.url}: the line at byte offset 4 from client {peer}"
    assert bad_record_error(records[2]).startswith(f"tcp source {source.url}: the line at byte offset 8 from client")


def test_tail_line_longer_than_the_limit_is_a_bad_record_and_memory_stays_bounded(
    tmp_path: Path, sources: list[Source]
) -> None:
    """A file without newlines was held whole. Its overlong line is now a bad record naming file and offset, and
    the rest of it is dropped as it is written, counting as read: a position taken meanwhile resumes past it."""
    log = tmp_path / "big.log"
    log.write_bytes(b"before\n" + b"x" * 5000)
    source = open_source(f"tail:{tmp_path}", max_line_bytes=1000)
    sources.append(source)
    before, bad = collect(source, 2)
    assert before.value == "before"
    assert "the line at byte offset 7 of big.log is longer than 1,000 bytes; it is dropped" in bad_record_error(bad)
    assert (bad.origin, bad.offset) == ("big.log", 7)
    append(log, "x" * 200_000)  # still no newline
    assert source.poll(10, 0.2) == []
    assert isinstance(source, TailSource) and all(len(f.partial) <= 1000 and not f.lines for f in source._files)
    position = msgpack.unpackb(msgpack.packb(source.position()), raw=False)
    assert position["files"][0]["offset"] == log.stat().st_size and position["files"][0]["dropping"]
    append(log, "y" * 100 + "\nafter\n" + "z" * 3000 + "\nlast\n")  # the rest of it, then a short and a long line
    records = collect(source, 3)
    assert [r.value for r in records] == ["after", None, "last"]
    assert f"byte offset {7 + 205_101 + 6} of big.log is longer than 1,000" in bad_record_error(records[1])
    resumed = open_source(f"tail:{tmp_path}", max_line_bytes=1000)  # from the position taken mid-line
    sources.append(resumed)
    resumed.seek(position)
    assert values(collect(resumed, 3)) == ["after", None, "last"]
    assert resumed.position()["files"][0]["offset"] == source.position()["files"][0]["offset"] == log.stat().st_size


def test_tail_copytruncate_while_dropping_an_overlong_line_reads_the_copy_on(
    tmp_path: Path, sources: list[Source]
) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"one\n" + b"x" * 3000)
    source = open_source(f"tail:{tmp_path}", max_line_bytes=1000)
    sources.append(source)
    assert values(collect(source, 2)) == ["one", None]
    append(log, "x" * 10 + "\ntwo\n")  # not read before the copy: only the copy has them
    copytruncate(log, tmp_path / "app.log.1")
    append(log, "three\n")
    assert values(collect(source, 2)) == ["two", "three"]
    assert source.poll(10, 0.1) == []


def test_replay_line_longer_than_the_limit_is_a_bad_record_skipped_unread(
    tmp_path: Path, sources: list[Source]
) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"one\n" + b"x" * 5000 + b"\n" + b"y" * 1000 + b"\n" + b"z" * 1001)  # the last without newline
    source = open_source(f"replay:{path}", max_line_bytes=1000)
    sources.append(source)
    records = collect(source, 4)
    assert [r.value for r in records] == ["one", None, "y" * 1000, None] and source.exhausted
    assert re.search(
        r"line 2 \(byte offset 4\) of .*lines\.txt is longer than 1,000 bytes", bad_record_error(records[1])
    )
    assert records[1].nbytes == 5001 and (records[3].offset, records[3].nbytes) == (4 + 5001 + 1001, 1001)
    assert source.position() == {"offset": path.stat().st_size, "line": 4}


# zmq


def test_zmq_pull_receives_msgpack_values(sources: list[Source]) -> None:
    source = opened(sources, "zmq:tcp://127.0.0.1:*")
    assert isinstance(source, ZmqSource) and not source.replayable and source.position() is None
    with connected_push(source) as push:
        sent = [{"user": f"u{i}", "n": i, "tags": ["a", "b"]} for i in range(50)]
        for value in sent:
            push.send(msgpack.packb(value))
        records = collect(source, 50, batch=7)
        assert values(records) == [{**value, "tags": ("a", "b")} for value in sent]  # arrays as tuples, as jsonl's
        assert records[0].nbytes == len(msgpack.packb(sent[0])) and source.where(records[0]) is None  # no place
        push.send(b"\xc1")  # never valid msgpack
        push.send(msgpack.packb("after"))
        bad, after = collect(source, 2)
        assert re.search(r"frame of 1 bytes starting b'\\xc1'.*not a msgpack value", bad_record_error(bad))
        assert "()" not in bad_record_error(bad) and "FormatError" in bad_record_error(bad)  # not an empty reason
        assert bad.nbytes == 1 and after.value == "after"  # the source goes on


def test_zmq_frames_packed_by_shuffle_codec_decode_big_ints(sources: list[Source]) -> None:
    """A producer packing with ``shuffle.codec`` (as hop's own ``--sink`` does, and as ints past 64 bits need)
    gets its values back, not ``msgpack.ExtType`` objects; map keys that are ints or arrays decode too."""
    source = opened(sources, "zmq:tcp://127.0.0.1:*")
    with connected_push(source) as push:
        sent = [{"n": 2**70, "neg": -(2**100), "nested": [[1, 2**64]]}, 3**50, {7: "int key", (1, 2): "array key"}]
        for value in sent:
            push.send(codec.packb(value))
        push.send(msgpack.packb({"plain": [1, 2]}))  # plain msgpack still works
        got = values(collect(source, 4))
        assert got == [
            {"n": 2**70, "neg": -(2**100), "nested": ((1, 2**64),)},
            3**50,
            {7: "int key", (1, 2): "array key"},
            {"plain": (1, 2)},
        ]
        assert not any(isinstance(value, msgpack.ExtType) for value in (got[0]["n"], got[1]))


def test_zmq_arrival_is_stamped_when_a_frame_is_taken_not_when_a_backlog_is_drained(sources: list[Source]) -> None:
    """A backlog read over several polls: each record's arrival is when its poll took it, so arrival-time windows
    are not fed old stamps after their watermark moved on (a drain of the whole backlog stamped it all at once)."""
    source = opened(sources, "zmq:tcp://127.0.0.1:*")
    with connected_push(source) as push:
        for i in range(3000):
            push.send(msgpack.packb(i))
        assert values(collect(source, 1, batch=1)) == [0]
        time.sleep(0.3)  # the backlog waits; what the next poll takes must not carry the first poll's time
        before = time.time()
        later = collect(source, 2999, batch=100)
        assert values(later) == list(range(1, 3000))
        assert min(record.arrival for record in later) >= before


def test_zmq_text_frames(sources: list[Source]) -> None:
    source = opened(sources, "zmq:tcp://127.0.0.1:*?format=text")
    with connected_push(source) as push:
        for text in ("héllo wörld", "two words\n", ""):
            push.send(text.encode())
        assert values(collect(source, 3)) == ["héllo wörld", "two words", ""]


def test_a_zmq_message_of_several_frames_is_one_record_its_last_frame(sources: list[Source]) -> None:
    """A publisher's send_multipart([topic, payload]) gave two records: the topic as a text record (counted as a
    word) or decoded as msgpack ('a' is the int 97), beside the payload."""
    text, packed = opened(sources, "zmq:tcp://127.0.0.1:*?format=text"), opened(sources, "zmq:tcp://127.0.0.1:*")
    with connected_push(text) as push, connected_push(packed) as push_packed:
        push.send_multipart([b"weather", b"sunny day"])
        push.send(b"single")
        push_packed.send_multipart([b"a", b"envelope", msgpack.packb({"ts": 1.0})])
        assert values(collect(text, 2)) == ["sunny day", "single"]
        assert values(collect(packed, 1)) == [{"ts": 1.0}]
        assert text.poll(10, 0.1) == [] and packed.poll(10, 0.1) == []


def test_zmq_sub_receives_from_a_publisher(sources: list[Source]) -> None:
    publisher: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)
    try:
        publisher.setsockopt(zmq.LINGER, 0)
        publisher.bind("tcp://127.0.0.1:*")
        source = opened(sources, f"zmq+sub:{publisher.getsockopt_string(zmq.LAST_ENDPOINT)}")
        # A subscription takes a moment to reach the publisher: publish until one arrives (bounded).
        deadline, records = time.monotonic() + 5, list[SourceRecord]()
        while not records and time.monotonic() < deadline:
            publisher.send(msgpack.packb("ping"))
            records = source.poll(10, 0.05)
        assert records and set(values(records)) == {"ping"}
        for i in range(20):
            publisher.send(msgpack.packb([i, "x"]))
        got = [v for v in values(collect(source, 20)) if v != "ping"]
        got += [v for v in values(collect(source, 20 - len(got))) if v != "ping"]
        assert got == [(i, "x") for i in range(20)]
    finally:
        publisher.close(linger=0)


def test_zmq_bind_conflict_is_a_source_error(sources: list[Source]) -> None:
    source = opened(sources, "zmq:tcp://127.0.0.1:*")
    assert isinstance(source, ZmqSource)
    with pytest.raises(SourceError, match=r"cannot bind .*tcp://127\.0\.0\.1:\d+.*; the port is taken: pick a free"):
        open_source(f"zmq:{source.endpoint}")


# tcp


def test_tcp_lines_from_two_clients(sources: list[Source]) -> None:
    source = opened(sources, "tcp:127.0.0.1:0")
    assert isinstance(source, TcpSource) and source.port > 0 and not source.replayable
    port = source.port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as one:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as two:
            one.sendall(b"one-a\none-")
            two.sendall(b"two-a\n")
            got = values(collect(source, 2))
            assert sorted(got) == ["one-a", "two-a"]
            one.sendall(b"b\n")
            two.sendall("zwei-ü\r\n".encode())
            assert sorted(values(collect(source, 2))) == ["one-b", "zwei-ü"]
            two.sendall(b"last without newline")
        # two is closed: its last line ends with the connection; one is still connected
        assert values(collect(source, 1)) == ["last without newline"]
        one.sendall(b"still here\n")
        assert values(collect(source, 1)) == ["still here"]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as three:  # clients may come at any time
        three.sendall(b"three\n\xff\nfour\n")
        good, bad, four = collect(source, 3)
        assert good.value == "three" and four.value == "four"
        assert re.search(r"from client 127\.0\.0\.1:\d+ is not valid UTF-8", bad_record_error(bad))
    assert source.poll(10, 0.1) == []


def test_tcp_clients_waiting_together_are_all_taken_in_one_poll(sources: list[Source]) -> None:
    """A client was accepted a poll: 2,000 clients of one line each took 15.5 s to read, where a plain accept loop
    took 5.2 s on the same machine (and a burst past the listen queue's 128 stalled their connects)."""
    source = opened(sources, "tcp:127.0.0.1:0")
    assert isinstance(source, TcpSource)
    for number in range(20):  # (a connect returns once the kernel queued it for accept: all 20 wait together)
        with socket.create_connection(("127.0.0.1", source.port), timeout=5) as client:
            client.sendall(b"line %d\n" % number)
    assert sorted(values(source.poll(1000, 2.0))) == sorted(f"line {number}" for number in range(20))


def test_tcp_line_longer_than_the_limit_is_a_bad_record_and_memory_stays_bounded(sources: list[Source]) -> None:
    source = open_source("tcp:127.0.0.1:0", max_line_bytes=1000)
    sources.append(source)
    assert isinstance(source, TcpSource)
    with socket.create_connection(("127.0.0.1", source.port), timeout=5) as client:
        client.sendall(b"before\n" + b"x" * 200_000)  # no newline: a client that never sends one
        first, bad = collect(source, 2)
        assert first.value == "before"
        assert "is longer than 1,000 bytes; it is dropped up to its newline" in bad_record_error(bad)
        assert all(len(c.partial) <= 1000 for c in source._clients)  # nothing of it held
        client.sendall(b"y" * 5000 + b"\nafter\n")  # the rest of that line, then a good one
        assert values(collect(source, 1)) == ["after"]
        client.sendall(b"z" * 3000 + b"\nok\n")  # an overlong line that arrives whole is as bad
        bad, ok = collect(source, 2)
        assert "from client" in bad_record_error(bad) and bad.nbytes == 3001 and ok.value == "ok"
    assert source.poll(10, 0.1) == []


def test_tcp_port_in_use_is_a_source_error(sources: list[Source]) -> None:
    source = opened(sources, "tcp:127.0.0.1:0")
    assert isinstance(source, TcpSource)
    with pytest.raises(SourceError, match="cannot listen on 127.0.0.1"):
        open_source(f"tcp:127.0.0.1:{source.port}")


# replay


def test_replay_rate_end_and_seek(tmp_path: Path, sources: list[Source]) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(f'{{"i": {i}}}\n' for i in range(200)))
    source = opened(sources, f"replay:{path}?rate=1000")
    assert source.replayable
    started = time.monotonic()
    records = collect(source, 200, timeout=5)
    elapsed = time.monotonic() - started
    assert values(records) == [f'{{"i": {i}}}' for i in range(200)]
    assert 0.1 < elapsed < 1.5, elapsed
    assert source.exhausted and source.poll(10, 0.5) == []

    again = opened(sources, f"replay:{path}")  # no rate: as fast as possible
    assert len(again.poll(50, 1.0)) == 50
    position = msgpack.unpackb(msgpack.packb(again.position()), raw=False)
    assert position["line"] == 50
    fresh = opened(sources, f"replay:{path}")
    fresh.seek(position)
    rest = collect(fresh, 150)
    assert values(rest) == [f'{{"i": {i}}}' for i in range(50, 200)] and fresh.exhausted


def test_replay_rate_over_one_second(tmp_path: Path, sources: list[Source]) -> None:
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"{i}\n" for i in range(1000)))
    source = opened(sources, f"replay:{path}?rate=100")
    records, deadline = [], time.monotonic() + 1.0
    while (left := deadline - time.monotonic()) > 0:
        records += source.poll(1000, left)
    assert 80 <= len(records) <= 120 and not source.exhausted


def test_replay_loop_and_last_line_without_newline(tmp_path: Path, sources: list[Source]) -> None:
    path = tmp_path / "three.txt"
    path.write_text("x\ny\nz")
    source = opened(sources, f"replay:{path}?loop=1")
    assert values(collect(source, 7, batch=2)) == ["x", "y", "z", "x", "y", "z", "x"]
    assert not source.exhausted
    source.close()
    source.close()  # idempotent
    with pytest.raises(SourceError, match="closed"):
        source.poll(1, 0)


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_replay_reads_a_compressed_file_decompressed_as_batch_does(
    tmp_path: Path, sources: list[Source], suffix: str
) -> None:
    """A compressed file was replayed raw: its bytes made one or two lines that were not UTF-8, and the source
    ended with no record (the bad record said to re-encode the file as UTF-8)."""
    module = {".gz": gzip, ".bz2": bz2, ".xz": lzma}[suffix]
    path = tmp_path / f"events.jsonl{suffix}"
    with module.open(path, "wb") as file:
        file.write(b"one\ntwo\nthree\n")
    source = opened(sources, f"replay:{path}")
    records = collect(source, 2, batch=2)
    assert values(records) == ["one", "two"] and places(records) == [(str(path), 0), (str(path), 4)]
    resumed = opened(sources, f"replay:{path}")
    resumed.seek(source.position())  # (a retry resumes from a checkpoint's position)
    assert not resumed.exhausted and values(collect(resumed, 1)) == ["three"]
    assert resumed.poll(10, 0.1) == [] and resumed.exhausted
    looping = opened(sources, f"replay:{path}?loop=1")
    assert values(collect(looping, 4)) == ["one", "two", "three", "one"] and not looping.exhausted


def test_replay_of_a_corrupt_compressed_file_names_the_command_that_checks_it(
    tmp_path: Path, sources: list[Source]
) -> None:
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(gzip.compress(b"".join(b"line %d\n" % n for n in range(20_000)))[:-100])
    source = opened(sources, f"replay:{path}")
    with pytest.raises(SourceError, match=rf"cannot decompress .*cut\.txt\.gz past byte .*`gzip -t {path}`"):
        collect(source, 30_000)


def test_every_source_option_is_documented_with_its_kind() -> None:
    """The README's Sources list gave ``replay:FILE?rate=N`` only, while the error for a bad URL listed
    ``replay:PATH[?rate=R&loop=0|1]``: each kind's options are named on its line of the README and docs/stream.md."""
    from hop.stream.sources import _OPTIONS

    readme = (ROOT / "README.md").read_text().split("### Sources", 1)[1].split("\n### ", 1)[0]
    table = (ROOT / "docs" / "stream.md").read_text().split("## Sources", 1)[1]
    for kind, options in _OPTIONS.items():
        for text, name in ((readme, "README.md"), (table, "docs/stream.md")):
            lines = [line for line in text.splitlines() if f"`{kind}:" in line]
            assert lines, f"{name} lists no {kind}: source"
            for option in options - {"format"}:  # (format: said of zmq frames in prose)
                assert any(f"{option}=" in line for line in lines), f"{name}: {kind}: lacks its option {option}"


# bad URLs


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("kafka:topic", r"unknown kind 'kafka'; use tail:DIR\[\?glob=PATTERN\], zmq:ENDPOINT"),
        ("/var/log", r"unknown kind '/var/log'"),
        ("tail:", r"nothing after tail:"),
        ("tail:{missing}", r"{missing} does not exist; create it or fix the path"),
        ("tail:{file}", r"{file} is not a directory; to follow that one file, give its directory and its name: "
         r"tail:{tmp}\?glob=file\.txt"),
        ("tail:{tmp}?rate=3", r"unknown option 'rate' for tail \(options: glob\)"),
        ("tail:{tmp}?glob=logs/*.log", r"glob must be a pattern for file names, such as \*\.log \(no /\)"),
        ("replay:{missing}", r"cannot open {missing} \(No such file or directory\)"),
        # (the map read the worker's /dev/null as its standard input and the job ended with no window; a named
        # pipe blocked the check until a writer came)
        ("replay:/dev/null", r"/dev/null is a character device, not a file"),
        ("replay:{fifo}", r"{fifo} is a pipe, not a file"),
        ("replay:{tmp}", r"{tmp} is a directory, not a file"),
        ("replay:{file}?rate=fast", r"rate must be a positive number"),
        ("replay:{file}?rate=0", r"rate must be a positive number"),
        ("replay:{file}?loop=yes", r"loop must be 0 or 1"),
        ("replay:{file}?rate", r"must be key=value pairs"),
        ("zmq:tcp://127.0.0.1:5600?format=json", r"format must be msgpack \(the default\) or text"),
        ("zmq:nonsense", r"expected a ZeroMQ endpoint after zmq:, such as tcp://HOST:PORT"),
        ("zmq+sub:tcp://", r"expected a ZeroMQ endpoint after zmq\+sub:"),
        ("zmq:ipc://{missing}/socket", r"zmq source zmq:ipc://{missing}/socket: cannot bind .*; the "
         r"socket file's directory does not exist: create it or fix the path"),
        # (this one's hint was about ports: 'cannot bind (tcp://HOST:* picks a free port)')
        ("zmq:tcp://no.such.host.invalid:1", r"zmq source zmq:tcp://no\.such\.host\.invalid:1: cannot bind "
         r"tcp://no\.such\.host\.invalid:1 \(No such device .*\); host 'no\.such\.host\.invalid' is neither a network "
         r"interface of the host the map runs on nor a name that resolves \(.*\); bind one of its addresses or "
         r"interfaces \(tcp://\*:PORT: every interface"),
        ("zmq:tcp://192.0.2.1:1", r"that address is not one of the host the map runs on: bind one of its addresses"),
        ("tcp:127.0.0.1", r"expected tcp:HOST:PORT"),
        ("tcp:127.0.0.1:99999", r"expected tcp:HOST:PORT"),
        ("tcp:no.such.host.invalid:0", r"cannot listen on no\.such\.host\.invalid:0 \(.*\); fix the host name"),
        ("tcp:192.0.2.1:0", r"cannot listen on 192\.0\.2\.1:0 \(.*\); listen on an address of this host"),
        # (ZeroMQ connects in the background: these ran for ever with nothing coming in, saying nothing)
        ("zmq+sub:tcp://no.such.host.invalid:1", r"zmq source zmq\+sub:tcp://no\.such\.host\.invalid:1: cannot "
         r"connect to tcp://no\.such\.host\.invalid:1: host 'no\.such\.host\.invalid' does not resolve \(.*\); fix "
         r"the host name, or give the publisher's IP address"),
        ("zmq+sub:tcp://lo;no.such.host.invalid:1", r"host 'no\.such\.host\.invalid' does not resolve"),
    ],
)  # fmt: skip
def test_bad_urls_raise_clear_source_errors(tmp_path: Path, url: str, message: str) -> None:
    (tmp_path / "file.txt").write_text("x\n")
    os.mkfifo(tmp_path / "fifo")
    names = {"missing": str(tmp_path / "missing"), "file": str(tmp_path / "file.txt"), "tmp": str(tmp_path),
             "fifo": str(tmp_path / "fifo")}  # fmt: skip
    with pytest.raises(SourceError, match=message.format(**{k: v.replace(".", r"\.") for k, v in names.items()})):
        open_source(url.format(**names)).close()


@pytest.mark.parametrize(
    ("folder", "name"),
    [("logs", "a&b.log"), ("logs", "100%41.log"), ("logs", "web+api.log"), ("logs & more", "c#d [1].log")],
)
def test_the_url_said_for_a_file_given_to_tail_follows_that_file(
    tmp_path: Path, sources: list[Source], folder: str, name: str
) -> None:
    """``tail:FILE`` says which URL follows the file; for a name with ``&`` or ``%`` that URL, copied, was another
    source ("options 'glob=a&b.log' must be key=value pairs", or glob=100A.log), and a shell took ``&`` or a space
    as its own. The URL is now percent-encoded where the options decode, and quoted where a shell would split it."""
    directory = tmp_path / folder
    directory.mkdir()
    (directory / name).write_text("wanted\n")
    (directory / "100A.log").write_text("other\n")
    with pytest.raises(SourceError) as refused:
        open_source(f"tail:{directory / name}")
    said = str(refused.value).split("give its directory and its name: ", 1)[1].rpartition(" (tail:DIR")[0]
    (url,) = shlex.split(said)  # (as a shell gives it to hop run --source)
    assert values(collect(opened(sources, url), 2, timeout=1)) == ["wanted"]


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("kafka:topic", True),
        ("tail:", True),
        ("replay:x?loop=yes", True),
        ("tcp:127.0.0.1:99999", True),
        ("zmq:bogus", True),
        ("tail:/no/such/dir", False),  # whether it is there is for the host a map runs on to say
        ("zmq:tcp://127.0.0.1:5600?format=text", False),
    ],
)
def test_check_source_refuses_what_open_source_would_without_opening(url: str, refused: bool) -> None:
    if refused:
        with pytest.raises(SourceError, match=f"source URL {re.escape(repr(url))}"):
            check_source(url)
    else:
        check_source(url)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("zmq:tcp://no.such.host.invalid:1", "cannot bind tcp://no.such.host.invalid:1: host 'no.such.host.invalid' "
         "is neither a network interface of the host the map runs on nor a name that resolves"),
        ("zmq+sub:tcp://no.such.host.invalid:1", "cannot connect to tcp://no.such.host.invalid:1: host "
         "'no.such.host.invalid' does not resolve"),
        ("tcp:no.such.host.invalid:1", "tcp source tcp:no.such.host.invalid:1: cannot listen on "
         "no.such.host.invalid:1 ("),
        ("zmq:tcp://lo:0", None),  # (an interface's name: ZeroMQ binds it)
        ("zmq:tcp://*:1", None),
        ("tcp:localhost:0", None),
    ],
)  # fmt: skip
def test_check_source_here_refuses_a_host_that_does_not_resolve(url: str, says: str | None) -> None:
    """``hop run --source zmq:tcp://nohost:1`` on its embedded cluster started the job, whose map then failed it
    (exit 1): the maps run on this host, so a host it cannot resolve is refused before the job starts; elsewhere
    (``--coordinator``) it is for the map's host to say."""
    check_source(url)
    if says is None:
        check_source(url, here=True)
        return
    with pytest.raises(SourceError) as refused:
        check_source(url, here=True)
    assert says in str(refused.value), refused.value


def test_a_bad_source_url_is_a_usage_error_before_the_job_starts(tmp_path: Path) -> None:
    result = hop(
        "run",
        str(ROOT / "jobs" / "stream_wordcount.py"),
        "--source",
        "kafka:topic",
        "--window",
        "10s",
        "-o",
        "out",
        "--quiet",
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "unknown kind 'kafka'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_replaying_the_runs_standard_input_is_refused_saying_how_to_stream_a_pipe(tmp_path: Path) -> None:
    """The map read its worker's standard input (/dev/null), not hop run's: the job ended at once, exit code 0, no
    window written, the piped lines unread."""
    command = [sys.executable, "-m", "hop", "run", str(ROOT / "jobs" / "stream_wordcount.py"), "--source"]
    command += ["replay:/dev/stdin", "--window", "1r", "-o", "out", "--no-view", "--quiet"]
    result = subprocess.run(command, cwd=tmp_path, input="a b\n", capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "/dev/stdin is a pipe, not a file; replay plays a file's lines" in result.stderr, result.stderr
    assert "PROGRAM | nc 127.0.0.1 PORT" in result.stderr and not (tmp_path / "out").exists()


def test_overwrite_never_clears_what_a_source_reads_or_the_job_file(tmp_path: Path) -> None:
    """--overwrite of an output directory that holds a replay file, a tailed directory or the job file is refused
    before a cluster starts, as for a batch job's inputs (it deleted them, and the map then failed to open its
    source); run_stream refuses it too."""
    from hop.client import Client
    from hop.loader import load_job_file
    from hop.runner import build_spec
    from hop.stream.options import stream_options
    from hop.stream.runner import run_stream

    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "events.txt").write_text("a b\n")
    job = out / "job.py"
    job.write_text((ROOT / "jobs" / "stream_wordcount.py").read_text())
    for source, held in ((f"replay:{out / 'events.txt'}?rate=5", "events.txt"), (f"tail:{out / 'logs'}", "logs")):
        result = hop("run", str(job), "--source", source, "--window", "1s", "-o", str(out), "--overwrite", "--quiet")
        assert result.returncode == 2, result.stderr
        assert f"holds input {out / held}: --overwrite would delete it" in result.stderr
        assert "coordinator" not in result.stderr  # refused before a cluster started
    result = hop("run", str(job), "--source", "tcp:127.0.0.1:0", "--window", "1s", "-o", str(out), "--overwrite")
    assert result.returncode == 2 and f"holds the job file {job}" in result.stderr
    spec = build_spec(
        load_job_file(str(job), None), [], str(out), overwrite=True,
        options={"stream": stream_options([f"replay:{out / 'events.txt'}"], "1s")},
    )  # fmt: skip
    client = Client("tcp://127.0.0.1:9", timeout=1)  # never reached: the output is refused first
    try:
        with pytest.raises(ValueError, match="--overwrite would delete it"):
            run_stream(client, spec, progress=False, view_interval=None)
    finally:
        client.close()
    assert sorted(p.name for p in out.iterdir()) == ["events.txt", "job.py", "logs"]


def test_check_source_here_requires_a_tail_directory_or_replay_file(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x\n")
    check_source(f"tail:{tmp_path}", here=True)
    check_source(f"replay:{tmp_path / 'file.txt'}", here=True)
    check_source("tcp:127.0.0.1:0", here=True)  # sockets are for the map to bind
    with pytest.raises(SourceError, match="does not exist; create it or fix the path"):
        check_source(f"tail:{tmp_path / 'missing'}", here=True)
    with pytest.raises(SourceError, match=r"cannot open .*missing\.txt \(No such file or directory\)"):
        check_source(f"replay:{tmp_path / 'missing.txt'}", here=True)


def test_hop_run_warns_of_a_tail_glob_no_file_matches(tmp_path: Path) -> None:
    """``--source tail:logs?glob=app.lg`` (a typo of app.log) read nothing and said nothing until stopped, as if the
    log were quiet; ``hop run`` now warns as it starts, naming the source and its directory (files that appear later
    are still read: not an error). A glob that matches a file gets no warning."""
    from tests.conftest import hop, job_path

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "app.log").write_text("a b\n")
    assert check_source(f"tail:{logs}?glob=*.log", here=True) is None
    assert check_source(f"tail:{logs}?glob=app.log", here=True) is None
    assert check_source(f"tail:{logs}", here=True) is None
    run = hop("run", job_path("stream_wordcount"), "--source", "tail:logs?glob=app.lg", "--window", "1s",
              "--duration", "2s", "-o", str(tmp_path / "out"), "--workers", "1", "--no-view", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert (
        "hop: warning: tail source tail:logs?glob=app.lg: no file in logs matches 'app.lg' yet; it reads such "
        "files once they appear" in run.stderr
    ), run.stderr


@pytest.mark.parametrize("url", ["tail:logs", "replay:events.txt"])
def test_a_missing_source_path_on_the_embedded_cluster_is_a_usage_error(tmp_path: Path, url: str) -> None:
    job = str(ROOT / "jobs" / "stream_wordcount.py")
    result = hop("run", job, "--source", url, "--window", "10s", "-o", "out", "--quiet", cwd=tmp_path)
    assert result.returncode == 2 and url.partition(":")[2] in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("duration", ["0", "-1", "0.0"])
def test_a_duration_that_is_not_above_zero_is_a_usage_error(tmp_path: Path, duration: str) -> None:
    (tmp_path / "in.txt").write_text("a\n")
    job = str(ROOT / "jobs" / "stream_wordcount.py")
    result = hop(
        "run", job, "--source", "replay:in.txt", "--window", "1s", f"--duration={duration}", "-o", "out", cwd=tmp_path
    )
    assert result.returncode == 2 and "expected a duration above zero" in result.stderr, result.stderr
