"""Reading text splits: every line exactly once, with its byte offset, whatever the split and chunk boundaries."""

from __future__ import annotations

import gzip
import itertools
import os
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import hop.inputs
from hop.client import Client
from hop.inputs import (
    KEEP_BYTES,
    MIN_SPLIT_BYTES,
    OUTPUT_LINES,
    InputError,
    ReadLimit,
    Split,
    expand_inputs,
    iter_lines,
    iter_records,
    make_splits,
    parse_output_line,
    split_size_for,
)
from hop.runner import JobFailed
from tests.conftest import needs_spark, run_job


def reference_lines(data: bytes) -> list[tuple[int, str]]:
    """(offset, line) of every line, computed the slow, obvious way."""
    lines = []
    position = 0
    for raw in data.split(b"\n"):
        if raw or position < len(data):
            text = raw.decode("utf-8")
            lines.append((position, text[:-1] if text.endswith("\r") else text))
        position += len(raw) + 1
    return lines


def random_text(rng: random.Random, lines: int) -> bytes:
    words = ["a", "bb", "word", "ünïcödé", "日本語", "x" * 40, "", "tab\there", "cr\r"]
    out = []
    for _ in range(lines):
        out.append(" ".join(rng.choice(words) for _ in range(rng.randrange(0, 8))))
    return "\n".join(out).encode("utf-8") + (b"\n" if rng.random() < 0.5 else b"")


def _random_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, chunk_bytes: int
) -> tuple[random.Random, bytes, Path, list[tuple[int, str]]]:
    """A file of ``random_text``, read ``chunk_bytes`` at a time: the generator, the bytes, the path, its lines."""
    rng = random.Random(seed)
    data = random_text(rng, 400)
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    monkeypatch.setattr(hop.inputs, "CHUNK_BYTES", chunk_bytes)
    return rng, data, path, reference_lines(data)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk_bytes", [7, 64, 1 << 22])
def test_splits_read_every_line_once_with_its_byte_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, chunk_bytes: int
) -> None:
    rng, data, path, expected = _random_input(tmp_path, monkeypatch, seed, chunk_bytes)
    for split_size in (1, 13, 100, 1000, len(data)):
        got = [pair for split in make_splits([str(path)], split_size) for pair in iter_lines(split)]
        assert got == expected, f"split size {split_size}"
    # Arbitrary cut points, not only the even ones make_splits chooses.
    cuts = sorted({0, len(data), *(rng.randrange(len(data)) for _ in range(9))})
    splits = [Split(str(path), lo, hi - lo) for lo, hi in zip(cuts, cuts[1:], strict=False) if hi > lo]
    assert [pair for split in splits for pair in iter_lines(split)] == expected


def test_every_short_file_is_read_line_for_line(tmp_path: Path) -> None:
    """Every file of up to 5 bytes of ``a``, newline and CR, whole, gzipped and cut into splits of every size: a
    file's first 3 bytes are read apart (to find a byte order mark), and a file of at most 3 bytes ending with a
    newline (``"\\n"``, ``"ab\\n"``) was read with an empty line more; cut into splits of 1 byte, its lines were
    read once by each split they spanned."""
    path = tmp_path / "input.txt"
    compressed = tmp_path / "input.txt.gz"
    for length in range(1, 6):
        for letters in itertools.product(b"a\n\r", repeat=length):
            data = bytes(letters)
            path.write_bytes(data)
            compressed.write_bytes(gzip.compress(data))
            expected = reference_lines(data)
            assert list(iter_lines(make_splits([str(compressed)], 1)[0])) == expected, data
            for split_size in range(1, length + 1):
                got = [pair for split in make_splits([str(path)], split_size) for pair in iter_lines(split)]
                assert got == expected, (data, split_size)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk_bytes", [7, 64, 1 << 22])
def test_a_split_cut_while_it_is_read_and_its_rest_read_every_line_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, chunk_bytes: int
) -> None:
    """Tail splitting: the reader is told to end early after any number of lines (``ReadLimit.cut``); the lines it
    read and those of the rest, read as a split of its own, are every line of the split once, in order."""
    rng, data, path, expected = _random_input(tmp_path, monkeypatch, seed, chunk_bytes)
    start = rng.randrange(len(data) // 3)
    split = Split(str(path), start, len(data) - start)
    whole = list(iter_lines(split))
    assert whole == [line for line in expected if line[0] >= start]
    cuts = 0
    for read_before_cut in sorted({0, 1, 2, len(whole) // 3, len(whole) // 2, len(whole) - 1, len(whole)}):
        for keep in (0.0, 0.3, 0.999):
            limit = ReadLimit(split)
            lines = iter_lines(split, limit=limit)
            got = [next(lines) for _ in range(read_before_cut)]
            rest = limit.cut(keep, min_bytes=1)
            got += list(lines)
            if rest is None:
                assert got == whole
                continue
            cuts += 1
            assert limit.end == rest.start and rest.end == split.end
            assert all(offset < rest.start for offset, _ in got)
            assert got + list(iter_lines(rest)) == whole, (read_before_cut, keep, rest)
    # Cut within the lines of one chunk too (a whole file in one chunk): the reader holds a few hundred at most.
    assert cuts >= 15
    # A whole (compressed) file is not cut, nor a rest shorter than asked for.
    assert ReadLimit(Split(str(path), 0, -1)).cut(0.5, 1) is None
    assert ReadLimit(split).cut(0.5, min_bytes=len(data)) is None


def test_split_size_fills_whole_waves_of_map_slots(tmp_path: Path) -> None:
    mb = 1 << 20
    assert split_size_for(128 * mb, 32 * mb, 2) == 32 * mb  # 4 splits: two waves already
    assert split_size_for(96 * mb, 32 * mb, 2) == 24 * mb  # 3 would leave a slot idle in the second wave: 4
    assert split_size_for(50 * mb, 32 * mb, 2) == 25 * mb  # 2 (1.56 rounds to 2)
    assert split_size_for(40 * mb, 32 * mb, 2) == 20 * mb  # 1 would leave a slot idle: 2
    assert split_size_for(96 * mb, 32 * mb, 1) == 32 * mb
    assert split_size_for(MIN_SPLIT_BYTES, 32 * mb, 8) == MIN_SPLIT_BYTES  # not finer than the minimum
    assert split_size_for(400_000, 100_000, 2) == 100_000  # a split size below the minimum is the user's
    with pytest.raises(ValueError, match="split size must be positive"):
        split_size_for(10, 0, 2)
    path = tmp_path / "input.txt"
    path.write_bytes(b"0123456789\n" * 300_000)  # 3.3 MB
    assert len(make_splits([str(path)], 32 * mb)) == 1
    splits = make_splits([str(path)], 32 * mb, slots=3)
    assert len(splits) == 3 and sum(split.length for split in splits) == path.stat().st_size


def test_offsets_index_the_file(tmp_path: Path) -> None:
    data = "première ligne\r\nzweite Zeile\n\nlast without newline".encode()
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    lines = list(iter_records(Split(str(path), 0, len(data)), "text"))
    assert [line for _, line in lines] == ["première ligne", "zweite Zeile", "", "last without newline"]
    for offset, line in lines:
        assert data[offset:].decode().startswith(line)


def test_undecodable_line_is_named_by_offset(tmp_path: Path) -> None:
    path = tmp_path / "input.txt"
    path.write_bytes(b"good line\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"input\.txt: line at byte offset 10 is not valid UTF-8"):
        list(iter_lines(Split(str(path), 0, path.stat().st_size)))


@pytest.mark.parametrize("split_end", [None, 26, 27])
def test_bad_lines_go_to_on_bad_and_the_rest_is_read(tmp_path: Path, split_end: int | None) -> None:
    """With ``on_bad`` (``--skip-bad-records``), an undecodable line is reported with its offset and left out; the
    lines around it, in the same chunk, keep their offsets; a split ending in that chunk keeps only its lines."""
    path = tmp_path / "input.txt"
    path.write_bytes(b"good line\nbad \xff byte\r\nnext\r\nlast\n")  # lines at 0, 10, 22, 28
    size = path.stat().st_size
    bad: list[tuple[int, str, str]] = []
    end = size if split_end is None else split_end
    lines = list(iter_lines(Split(str(path), 0, end), on_bad=lambda *entry: bad.append(entry)))
    expected = [(0, "good line"), (22, "next"), (28, "last")]
    assert lines == [(offset, line) for offset, line in expected if offset < end]
    assert [(offset, line) for offset, line, _ in bad] == [(10, "bad \\xff byte\r")], "the byte, not U+FFFD"
    assert "byte offset 10 is not valid UTF-8" in bad[0][2]
    rest = list(iter_lines(Split(str(path), end, size - end))) if end < size else []
    assert rest == [(offset, line) for offset, line in expected if offset >= end], "each line read once"


def test_a_bad_last_line_without_a_newline_goes_to_on_bad(tmp_path: Path) -> None:
    path = tmp_path / "input.txt"
    path.write_bytes(b"good\nbad \xff")
    bad: list[tuple[int, str, str]] = []
    lines = list(iter_lines(Split(str(path), 0, path.stat().st_size), on_bad=lambda *entry: bad.append(entry)))
    assert lines == [(0, "good")] and [offset for offset, _, _ in bad] == [5]


def test_json_arrays_inside_objects_arrive_as_tuples(tmp_path: Path) -> None:
    """Arrays at any depth arrive as tuples, inside objects too (as values that crossed the shuffle do), in jsonl
    input and in a step's output read back: a record's array can be a key, and a read-back value equals the one the
    next step's shuffle would give."""
    path = tmp_path / "input.jsonl"
    path.write_text('{"tags": ["a", ["b"]], "meta": {"xs": [1, {"ys": [2]}]}, "n": 1}\n[{"zs": [3]}]\n')
    records = list(iter_records(Split(str(path), 0, path.stat().st_size), "jsonl"))
    record = {"tags": ("a", ("b",)), "meta": {"xs": (1, {"ys": (2,)})}, "n": 1}
    assert records == [(0, record), (65, ({"zs": (3,)},))]
    assert hash(records[0][1]["tags"]) == hash(("a", ("b",))) and hash(records[0][1]["meta"]["xs"][1]["ys"])
    assert parse_output_line('["k", [1]]\t{"v": [[2]]}', "out", 0) == (("k", (1,)), {"v": ((2,),)})


@pytest.fixture
def python_default_int_digits() -> Iterator[None]:
    """Python's default limit on int <-> str conversion (4,300 digits) for the test: task processes lift it (ints of
    any size are keys and values), and a test that calls a Spark task function in this process lifts it here too."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(limit)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('"k" 1', "has no TAB"),
        ("{k\t1", "has a key that is not JSON: Expecting property name enclosed in double quotes"),
        ('"k"\t[1', "has a value that is not JSON: Expecting ',' delimiter"),
        ('"k"\t' + "1" * 5000, "has a value that cannot be read as JSON: Exceeds the limit"),
    ],
    ids=["no-tab", "key-not-json", "value-not-json", "value-of-5000-digits"],
)
def test_a_bad_line_of_output_names_the_file_the_offset_the_problem_and_the_format(
    tmp_path: Path, line: str, problem: str, python_default_int_digits: None
) -> None:
    """The one reader of hop output lines (``--input-format output``, a pipeline's pipe, a Spark step's input):
    a bad line said "is not JSON" without saying which part or what the format reads (and on Spark, between steps,
    nothing but json's own message)."""
    path = tmp_path / "part-00000"
    path.write_text(f'"a"\t1\n{line}\n', encoding="utf-8")
    with pytest.raises(InputError) as refused:
        list(iter_records(Split(str(path), 0, path.stat().st_size), "output"))
    expected = f"input file {path}: line at byte offset 6 {problem}"
    assert str(refused.value).startswith(expected), str(refused.value)
    assert str(refused.value).endswith(": " + OUTPUT_LINES)
    assert "reads the part files a hop job wrote, json(key) TAB json(value) per line" in OUTPUT_LINES
    with pytest.raises(InputError, match=f"^the output of step 1 \\(reducer 0\\): line 2 {re.escape(problem)}"):
        parse_output_line(line, "the output of step 1 (reducer 0)", 2, numbered=True)


def test_unparsable_records_go_to_on_bad(tmp_path: Path) -> None:
    path = tmp_path / "input.jsonl"
    path.write_text('{"a": 1}\n{not json\n\n[2]\n', encoding="utf-8")
    bad: list[tuple[int, str, str]] = []
    split = Split(str(path), 0, path.stat().st_size)
    records = list(iter_records(split, "jsonl", on_bad=lambda *entry: bad.append(entry)))
    assert records == [(0, {"a": 1}), (20, (2,))]  # the blank line is no record; JSON arrays arrive as tuples
    assert [(offset, line) for offset, line, _ in bad] == [(9, "{not json")]
    with pytest.raises(InputError, match="line at byte offset 9 is not JSON"):
        list(iter_records(split, "jsonl"))


def test_a_jsonl_line_of_whitespace_json_does_not_allow_is_a_bad_record_not_a_blank_one(tmp_path: Path) -> None:
    """A blank line (spaces, tabs, a CR: JSON's whitespace) is no record; a line of other white space Python's
    ``str.strip`` removes (a no-break space, U+2028, the control character 0x1C) is not JSON, so a bad record: it
    was left out as blank, without an error or an entry in ``_bad_records``."""
    path = tmp_path / "input.jsonl"
    path.write_bytes(b'{"a": 1}\n \t\r\n\xc2\xa0\n\xe2\x80\xa8\n\x1c\n[2]\n')
    bad: list[tuple[int, str, str]] = []
    split = Split(str(path), 0, path.stat().st_size)
    records = list(iter_records(split, "jsonl", on_bad=lambda *entry: bad.append(entry)))
    assert records == [(0, {"a": 1}), (22, (2,))]
    assert [(offset, line) for offset, line, _ in bad] == [(13, "\xa0"), (16, "\u2028"), (20, "\x1c")]
    with pytest.raises(InputError, match="line at byte offset 13 is not JSON"):
        list(iter_records(split, "jsonl"))


def test_overlong_line_is_refused_with_its_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hop.inputs, "CHUNK_BYTES", 16)
    path = tmp_path / "input.txt"
    path.write_bytes(b"short\n" + b"x" * 1000 + b"\nshort again\n")
    split = Split(str(path), 0, path.stat().st_size)
    with pytest.raises(InputError, match=r"line at byte offset 6 is longer than 500 bytes; raise --max-line-bytes"):
        list(iter_lines(split, max_line_bytes=500))
    assert [line for _, line in iter_lines(split, max_line_bytes=1000)] == ["short", "x" * 1000, "short again"]


@pytest.mark.parametrize("last_newline", [b"\n", b""])
def test_a_line_over_the_limit_is_refused_when_it_fits_in_a_chunk(tmp_path: Path, last_newline: bytes) -> None:
    path = tmp_path / "input.txt"
    path.write_bytes(b"short\n" + b"y" * 50 + b"\n" + b"x" * 150 + b"\nlast" + b"z" * 200 + last_newline)
    split = Split(str(path), 0, path.stat().st_size)  # one chunk: the lines end within it
    with pytest.raises(InputError, match=r"line at byte offset 57 is longer than 100 bytes"):
        list(iter_lines(split, max_line_bytes=100))
    with pytest.raises(InputError, match=r"line at byte offset 208 is longer than 200 bytes"):
        list(iter_lines(split, max_line_bytes=200))
    assert len(list(iter_lines(split, max_line_bytes=204))) == 4


@pytest.mark.parametrize("first_line", [b"", b"a", b"ab"])
@pytest.mark.parametrize("last_newline", [b"\n", b""])
def test_a_long_line_after_a_short_first_line_is_measured_and_named_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_line: bytes, last_newline: bytes
) -> None:
    """A file's first 3 bytes are read apart (to find a byte order mark): a first line ending within them was
    counted into the line after it while that line was read chunk after chunk, so a line at the limit failed, and
    one over it was named at the file's first byte."""
    monkeypatch.setattr(hop.inputs, "CHUNK_BYTES", 7)
    path = tmp_path / "input.txt"
    second = len(first_line) + 1
    path.write_bytes(first_line + b"\n" + b"x" * 30 + last_newline)
    split = Split(str(path), 0, path.stat().st_size)
    assert list(iter_lines(split, max_line_bytes=30)) == [(0, first_line.decode()), (second, "x" * 30)]
    with pytest.raises(InputError, match=rf"line at byte offset {second} is longer than 29 bytes"):
        list(iter_lines(split, max_line_bytes=29))


@pytest.mark.parametrize("input_format", ["text", "csv", "jsonl"])
def test_a_byte_order_mark_at_the_start_of_a_file_is_skipped(tmp_path: Path, input_format: str) -> None:
    path = tmp_path / "input.txt"
    first = {"text": "name,count", "csv": "name,count", "jsonl": '{"name": "a"}'}[input_format]
    path.write_bytes(hop.inputs.UTF8_BOM + first.encode() + b'\n{"b": 1}\n')
    split = Split(str(path), 0, path.stat().st_size)
    records = list(iter_records(split, input_format))
    assert records[0][0] == 3
    assert records[0][1] == {"text": "name,count", "csv": ["name", "count"], "jsonl": {"name": "a"}}[input_format]


@pytest.mark.parametrize("chunk_bytes", [2, 7, 1 << 22])
@pytest.mark.parametrize("first_line", [b"", b"a", b"first line"])
def test_splits_cut_anywhere_near_a_byte_order_mark_read_every_line_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int, first_line: bytes
) -> None:
    """The first line of a file that starts with a BOM is read once, at its offset after the BOM, whatever two
    splits cut the file near it: a split starting inside the BOM (or right after it) skipped it as the split
    before's, and that split, ending before its first byte, had left it to the next one: it was lost."""
    monkeypatch.setattr(hop.inputs, "CHUNK_BYTES", chunk_bytes)
    path = tmp_path / "input.txt"
    data = hop.inputs.UTF8_BOM + first_line + b"\nsecond\nthird\n"
    path.write_bytes(data)
    expected = [(3, first_line.decode()), (4 + len(first_line), "second"), (11 + len(first_line), "third")]
    for cut in range(1, len(first_line) + 6):
        for second_cut in (cut + 1, cut + 3, len(data)):
            bounds = sorted({0, cut, min(second_cut, len(data)), len(data)})
            splits = [Split(str(path), lo, hi - lo) for lo, hi in zip(bounds, bounds[1:], strict=False)]
            assert [pair for split in splits for pair in iter_lines(split)] == expected, bounds
    for split_size in range(1, 6):  # as make_splits cuts it, for --split-size
        got = [pair for split in make_splits([str(path)], split_size) for pair in iter_lines(split)]
        assert got == expected, f"split size {split_size}"


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown input format"):
        list(iter_records(Split("x", 0, 1), "parquet"))


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".lzma"])
def test_compressed_inputs_are_read_whole_and_a_corrupt_one_names_its_file(tmp_path: Path, suffix: str) -> None:
    """.bz2 and .xz are read as .gz is (a line that was not UTF-8 was all they gave); each is one split; a corrupt
    or truncated one is an input error naming the file and the tool that checks it."""
    import bz2
    import functools
    import gzip
    import lzma

    legacy = functools.partial(lzma.compress, format=lzma.FORMAT_ALONE)
    compress = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress, ".lzma": legacy}[suffix]
    text = b"".join(b"line %d of some text\n" % n for n in range(50_000))
    path = tmp_path / f"input.txt{suffix}"
    path.write_bytes(compress(text))
    assert make_splits([str(path)], 1 << 10) == [Split(str(path), 0, -1)]
    lines = list(iter_lines(Split(str(path), 0, -1)))
    assert [line for _, line in lines] == text.decode().splitlines() and lines[1][0] == len("line 0 of some text\n")
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # zeroed in the middle: the decompressor fails
    path.write_bytes(bytes(data))
    tool = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".lzma": "xz"}[suffix]
    with pytest.raises(
        InputError, match=rf"input file .*input\.txt\{suffix}: cannot decompress it past byte [\d,]+ .*`{tool} -t "
    ):
        list(iter_lines(Split(str(path), 0, -1)))
    path.write_bytes(compress(text)[:100])
    with pytest.raises(InputError, match=r"truncated"):
        list(iter_lines(Split(str(path), 0, -1)))


def test_a_corrupt_gzip_file_whose_garbage_is_not_utf8_is_named_corrupt_not_badly_encoded(tmp_path: Path) -> None:
    """Bytes changed in the middle of a .gz decompress into garbage before its checksum fails at its end: the job
    failed on the first garbage line, saying to re-encode the file as UTF-8. The file is checked then, and the error
    says it is corrupt, how far it decompresses and how to check it; a sound file's bad line is still named as such."""
    import gzip

    text = b"".join(b"line %d of some text\n" % n for n in range(50_000))
    path = tmp_path / "input.txt.gz"
    packed = bytearray(gzip.compress(text, compresslevel=0))  # stored: changed bytes come out as they are
    packed[1000:1064] = b"\xff" * 64
    path.write_bytes(bytes(packed))
    with pytest.raises(InputError) as refused:
        list(iter_lines(Split(str(path), 0, -1)))
    message = str(refused.value)
    assert "not valid UTF-8" not in message and "re-encode" not in message, message
    assert re.fullmatch(
        rf"input file {re.escape(str(path))}: cannot decompress it past byte [\d,]+ of its text, having read "
        rf"{len(packed):,} of its {len(packed):,} bytes \(.*\): the file is truncated, corrupt or not gzip data; "
        rf"check it with `gzip -t .*`, or rename it if it is not compressed \(its text is not UTF-8 from the line at "
        r"byte offset [\d,]+, before that\)",
        message,
    ), message
    path.write_bytes(gzip.compress(b"fine\ncaf\xe9\n"))
    with pytest.raises(InputError, match=r"line at byte offset 5 is not valid UTF-8 .*re-encode the file as UTF-8$"):
        list(iter_lines(Split(str(path), 0, -1)))


def truncated_gzip(path: Path, lines: int) -> tuple[int, int]:
    """Write half of the gzip of ``lines`` numbered lines to ``path``; return ``(its size, the bytes of text it
    decompresses to)``."""
    import gzip
    import zlib

    packed = gzip.compress(b"".join(b"line %d of some text\n" % n for n in range(lines)))
    half = packed[: len(packed) // 2]
    path.write_bytes(half)
    return len(half), len(zlib.decompressobj(wbits=31).decompress(half))


def test_a_truncated_gzip_file_is_named_with_where_its_text_ends(tmp_path: Path) -> None:
    """A truncated .gz failed "near byte 0 of its text" whatever it held (the failed read loses the text it had
    decompressed): the error now says how far its text and the file were read."""
    path = tmp_path / "input.txt.gz"
    size, text_bytes = truncated_gzip(path, 20_000)
    assert text_bytes > 200_000
    with pytest.raises(InputError) as refused:
        list(iter_lines(Split(str(path), 0, -1)))
    assert str(refused.value) == (
        f"input file {path}: cannot decompress it past byte {text_bytes:,} of its text, having read {size:,} of its "
        f"{size:,} bytes (Compressed file ended before the end-of-stream marker was reached): the file is truncated, "
        f"corrupt or not gzip data; check it with `gzip -t {path}`, or rename it if it is not compressed"
    )


@pytest.mark.parametrize("before", [b"", b"\0" * 10], ids=["right-after", "after-padding"])
def test_bytes_after_a_gzip_files_data_are_named_with_where_they_start(tmp_path: Path, before: bytes) -> None:
    """Bytes that are not gzip data after a .gz file's members (gzip -d ignores them with a warning) failed its map
    as "truncated, corrupt or not gzip data", saying it had read all its bytes and not where its data ended. The
    error says where they start and how to look at them and cut them off; cut off, the file reads whole."""
    import gzip

    path = tmp_path / "input.txt.gz"
    members = gzip.compress(b"one\ntwo\n") + gzip.compress(b"three\n")  # (two members, as concatenated files)
    path.write_bytes(members + before + b"garbage after the data\n")
    size = path.stat().st_size
    with pytest.raises(InputError) as refused:
        list(iter_lines(Split(str(path), 0, -1)))
    assert str(refused.value) == (
        f"input file {path}: {size - len(members):,} bytes that are not gzip data follow its gzip data "
        f"(b'garbage after th'..., from byte {len(members):,} of its {size:,}; its 14 bytes of text decompress "
        f"whole): gzip -d ignores such bytes with a warning, hop reads no input it cannot read whole; look at them "
        f"(`tail -c +{len(members) + 1} {path} | od -c | head`) and, if they hold no data, cut them off "
        f"(`truncate -s {len(members)} {path}`)"
    )
    os.truncate(path, len(members))
    assert [line for _, line in iter_lines(Split(str(path), 0, -1))] == ["one", "two", "three"]
    path.write_bytes(members + before)  # (zero padding alone is read past, as gzip -d does)
    assert [line for _, line in iter_lines(Split(str(path), 0, -1))] == ["one", "two", "three"]


def test_counting_the_text_of_a_failed_compressed_file_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed read, a compressed file was decompressed again in full to say how far its text goes: a huge
    file corrupt near its end took as long again to fail. The count stops after ``EXTENT_SECONDS`` (here at once,
    after the first block) and the error says what it counted as a lower bound."""
    path = tmp_path / "input.txt.gz"
    size, text_bytes = truncated_gzip(path, 200_000)
    monkeypatch.setattr(hop.inputs, "EXTENT_SECONDS", 0.0)
    with pytest.raises(InputError) as refused:
        list(iter_lines(Split(str(path), 0, -1)))
    message = str(refused.value)
    counted = re.fullmatch(
        rf"input file {re.escape(str(path))}: cannot decompress it \(Compressed file ended before the "
        r"end-of-stream marker was reached\); at least ([\d,]+) bytes of its text decompress \(from the first "
        rf"([\d,]+) of its {size:,} bytes: counting stopped after 0 s\): the file is truncated, corrupt or not gzip "
        rf"data; check it with `gzip -t {re.escape(str(path))}`, or rename it if it is not compressed",
        message,
    )
    assert counted is not None, message
    text_counted, read_counted = (int(group.replace(",", "")) for group in counted.groups())
    assert 0 < text_counted < text_bytes and 0 < read_counted < size, message


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000 + "]" * 100_000, "[" * 700 + "]" * 700, "1" * 5000],
    ids=["nesting-json-refuses", "nesting-json-reads", "5000-digit-int"],
)
def test_json_that_python_cannot_read_is_a_bad_line_with_its_offset(
    tmp_path: Path, text: str, python_default_int_digits: None
) -> None:
    # json.loads raises RecursionError for deep nesting and ValueError for an int over 4,300 digits, neither a
    # JSONDecodeError: they must name the line, and --skip-bad-records must be able to skip them.
    # How deep is too deep follows the interpreter's recursion limit, which an imported library may raise (jedi,
    # which PySpark's imports can pull in, sets 3000): the test pins Python's default.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        _check_a_bad_json_line_is_named(tmp_path, text)
    finally:
        sys.setrecursionlimit(limit)


def _check_a_bad_json_line_is_named(tmp_path: Path, text: str) -> None:
    path = tmp_path / "input.jsonl"
    path.write_text('{"k": "a"}\n' + text + '\n{"k": "b"}\n', encoding="utf-8")
    split = Split(str(path), 0, path.stat().st_size)
    with pytest.raises(InputError, match="line at byte offset 11 cannot be read as JSON"):
        list(iter_records(split, "jsonl"))
    bad: list[tuple[int, str, str]] = []
    records = list(iter_records(split, "jsonl", on_bad=lambda *entry: bad.append(entry)))
    assert [record for _, record in records] == [{"k": "a"}, {"k": "b"}]
    assert [offset for offset, _, _ in bad] == [11]


def test_a_split_starting_inside_a_long_line_skips_it_without_holding_it(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "input.txt"
    long_bytes = 24 << 20
    path.write_bytes(b"x" * long_bytes + b"\nafter\n")
    tracemalloc.start()
    try:
        lines = list(iter_lines(Split(str(path), 1 << 20, path.stat().st_size - (1 << 20)), max_line_bytes=1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [(long_bytes + 1, "after")]
    assert peak < 4 * hop.inputs.CHUNK_BYTES, f"held {peak:,} bytes to skip the line"


def test_a_long_line_is_read_holding_it_twice_at_most(tmp_path: Path) -> None:
    """A line of many chunks is gathered in one growing buffer, and its bytes are let go once decoded: it is held
    at most twice (bytes and text, then text and the line split from it). Before, it was held three times at the
    peak (48 MB traced for this 16 MiB line), and a 300 MB line took its map 1.2 GB resident. (A line of other than
    ASCII is still held three times as it is decoded: Python's UTF-8 decoder holds its own buffer.)"""
    import tracemalloc

    path = tmp_path / "input.txt"
    long_bytes = 16 << 20
    path.write_bytes(b"short\n" + b"y" * long_bytes + b"\nend\n")
    tracemalloc.start()
    try:
        lengths = [(offset, len(line)) for offset, line in iter_lines(Split(str(path), 0, -1))]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lengths == [(0, 5), (6, long_bytes), (long_bytes + 7, 3)]
    assert peak < 2.5 * long_bytes, f"held {peak:,} bytes to read a line of {long_bytes:,}"


def test_an_undecodable_long_line_is_named_at_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "input.txt"
    path.write_bytes(b"short\n" + b"y" * (3 << 20) + b"\xff\nend\n")
    with pytest.raises(InputError, match="byte offset 6"):
        list(iter_lines(Split(str(path), 0, -1)))
    skipped: list[int] = []
    lines = list(iter_lines(Split(str(path), 0, -1), on_bad=lambda offset, *_: skipped.append(offset)))
    assert [line for _, line in lines] == ["short", "end"] and skipped == [6]


def test_globs_leave_out_bookkeeping_files_as_directories_do(tmp_path: Path) -> None:
    from hop.inputs import expand_inputs

    for name in ("part-00000", "part-00001", "_SUCCESS", "_job.json", ".hidden"):
        (tmp_path / name).write_text("x\n")
    listed = [Path(path).name for path in expand_inputs([str(tmp_path / "*")])]
    assert listed == [Path(path).name for path in expand_inputs([str(tmp_path)])] == ["part-00000", "part-00001"]
    assert [Path(p).name for p in expand_inputs([str(tmp_path / "_job.json")])] == ["_job.json"]  # named: read
    with pytest.raises(InputError, match="matches no file"):
        expand_inputs([str(tmp_path / "_*")])


def test_a_directory_is_read_with_its_subdirectories_but_not_the_output_inside_it(tmp_path: Path) -> None:
    """Subdirectories used to be skipped without a word (``logs/2026-11-25/app.log`` was never read); an empty
    directory ran the job on nothing. Now a directory is read at any depth, as mrjob reads it, and holding no file
    is an error, as a glob matching nothing is."""
    from hop.inputs import expand_inputs

    data = tmp_path / "data"
    for name in ("b.txt", "day-2/x.txt", "day-1/y.txt", "day-1/deeper/z.txt", "_skipped/w.txt", ".hidden/v.txt"):
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("x\n")
    (data / "out").mkdir()
    (data / "out" / "part-00000").write_text("being written\n")
    (data / "day-1" / "loop").symlink_to(data)  # a link back up is read once
    found = [str(Path(path).relative_to(data)) for path in expand_inputs([str(data)], output=str(data / "out"))]
    assert found == ["b.txt", "day-1/y.txt", "day-1/deeper/z.txt", "day-2/x.txt"]
    assert "out/part-00000" in [str(Path(p).relative_to(data)) for p in expand_inputs([str(data)])]
    (tmp_path / "empty" / "nothing" / "here").mkdir(parents=True)
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    with pytest.raises(InputError, match=r"input directory .*empty holds no file to read"):
        expand_inputs([str(tmp_path / "empty")])


def test_a_pipe_is_named_as_such_not_missing(tmp_path: Path) -> None:
    from hop.inputs import expand_inputs

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match=r"fifo is not a regular file or a directory \(a pipe, socket or device\)"):
        expand_inputs([str(tmp_path / "fifo")])


def test_a_loop_of_symbolic_links_is_named_as_one_not_as_a_missing_target(tmp_path: Path) -> None:
    """``b.txt -> c.txt -> b.txt`` was refused as "a symbolic link to c.txt, which does not exist", which sent the
    user looking for a file that is there (as a link): a loop is named as such, in a directory or given itself."""
    from hop.inputs import expand_inputs

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("x\n")
    (data / "b.txt").symlink_to("c.txt")
    (data / "c.txt").symlink_to("b.txt")
    for given in (data, data / "b.txt"):
        with pytest.raises(InputError) as loop:
            expand_inputs([str(given)])
        message = str(loop.value)
        assert message.startswith(f"input {data / 'b.txt'} is a symbolic link to c.txt, in a loop of symbolic links")
        assert "does not exist" not in message and "point it (or a link it leads to) at a file" in message, message


def test_a_broken_link_or_a_pipe_inside_an_input_directory_is_named_not_left_out(tmp_path: Path) -> None:
    """Such entries were skipped without a word, so the data the user meant to give was silently missing."""
    from hop.inputs import expand_inputs

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("x\n")
    (data / "b.txt").symlink_to(tmp_path / "moved.txt")
    # The message ended "(names starting with _ or . are left out)", which said nothing of a link: it says what to do.
    with pytest.raises(InputError) as broken:
        expand_inputs([str(data)])
    assert str(broken.value) == (
        f"input {data / 'b.txt'} is a symbolic link to {tmp_path / 'moved.txt'}, which does not exist: restore its "
        "target, remove the link, or rename it to start with _ to leave it out"
    )
    # Given itself, it was said not to exist, as if the link were not there; matched by a glob, too.
    with pytest.raises(InputError, match=r"b.txt is a symbolic link to .*moved.txt, which does not exist: restore its"):
        expand_inputs([str(data / "b.txt")])
    with pytest.raises(InputError, match=r"b.txt is a symbolic link to .*moved.txt, .*: restore its target, or remove"):
        expand_inputs([str(data / "b*")])
    (data / "b.txt").rename(data / "_b.txt")  # left out, as every _ name is
    os.mkfifo(data / "sub-fifo")
    with pytest.raises(InputError, match=r"sub-fifo is not a regular file or a directory .*rename it to start with _"):
        expand_inputs([str(data)])
    (data / "sub-fifo").unlink()
    assert expand_inputs([str(data)]) == [str(data / "a.txt")]


def test_a_quoted_csv_field_spanning_lines_is_named_as_the_likely_cause(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text('a,b\n"x\ny",2\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"CSV row at byte offset 4: .*\(a quoted field spanning lines\? each CSV"):
        list(iter_records(Split(str(path), 0, path.stat().st_size), "csv"))


def test_a_compressed_suffix_in_capitals_is_read_decompressed(tmp_path: Path) -> None:
    """``LOGS.TXT.GZ`` was read as text (and failed as not UTF-8), while ``LOGS.ZST`` was refused as compressed."""
    import gzip

    path = tmp_path / "LOGS.TXT.GZ"
    path.write_bytes(gzip.compress(b"one\ntwo\n"))
    assert make_splits([str(path)], 1 << 20) == [Split(str(path), 0, -1)]
    assert [line for _, line in iter_lines(Split(str(path), 0, -1))] == ["one", "two"]


def test_a_file_compressed_in_a_format_hop_does_not_read_is_refused_before_the_job(tmp_path: Path) -> None:
    """A ``.zst`` input (so ``.bz2`` and ``.xz`` before hop read them) was read as text: the job failed midway with
    "not valid UTF-8 ... re-encode the file as UTF-8", and with ``--skip-bad-records`` it mapped whatever compressed
    bytes decoded as lines and succeeded. It is now a usage error before the job starts, naming the file and what
    to do; ``.gz`` is still read."""
    import gzip

    from tests.conftest import ROOT, hop

    text = b"".join(b"word%d other\n" % (n % 7) for n in range(2_000))
    (tmp_path / "logs.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(256)) * 8)  # a Zstandard frame's magic
    (tmp_path / "logs.txt.gz").write_bytes(gzip.compress(text))
    job = str(ROOT / "jobs" / "wordcount.py")
    ran = hop("run", job, "logs.txt.zst", "-o", "out", "--quiet", "--skip-bad-records", "1000", cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    assert f"input file {tmp_path / 'logs.txt.zst'} is Zstandard-compressed, which hop does not read" in ran.stderr
    assert "decompress it (unzstd) or recompress it with gzip" in ran.stderr
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    ran = hop("run", job, "logs.txt.gz", "-o", "out", "--quiet", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr


def test_a_compressed_suffix_is_taken_at_its_files_word_only_where_its_bytes_agree(tmp_path: Path) -> None:
    """A text file named ``notes.zip`` (or ``.z``, ``.br``...) was refused by its name alone as compressed in a
    format hop does not read, and gzip data named ``.zip`` was called zip. What the file's first bytes are decides
    now: text is read as text; another format's data is named as such, with the suffix that makes hop read it, or
    the tool that decompresses it; data without first bytes of its own (Brotli) is still taken at its name."""
    import bz2

    from tests.conftest import ROOT, hop

    text = b"one two\nthree\n"
    files = {
        "notes.zip": text,
        "notes.Z": text,
        "notes.br": text,
        "empty.zst": b"",
        "gzip.zip": gzip.compress(text),
        "bzip2.lz4": bz2.compress(text),
        "zip.zip": b"PK\x03\x04" + bytes(range(256)),
        "zstd.7z": b"\x28\xb5\x2f\xfd" + bytes(range(256)),
        "noise.br": bytes(range(256)) * 4,
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)

    def refusal(name: str) -> str:
        with pytest.raises(InputError) as refused:
            expand_inputs([str(tmp_path / name)])
        return str(refused.value)

    for name in ("notes.zip", "notes.Z", "notes.br", "empty.zst"):
        assert expand_inputs([str(tmp_path / name)]) == [str(tmp_path / name)]
    assert refusal("gzip.zip") == (
        f"input file {tmp_path / 'gzip.zip'} is gzip data (its first bytes are gzip's), not zip as its name says: "
        "rename it to end .gz, which hop reads decompressed"
    )
    assert "is bzip2 data (its first bytes are bzip2's), not LZ4 as its name says: rename it to end .bz2" in refusal(
        "bzip2.lz4"
    )
    assert f"{tmp_path / 'zip.zip'} is zip-compressed, which hop does not read" in refusal("zip.zip")
    assert "is Zstandard-compressed, which hop does not read (it reads .gz, .bz2, .xz and .lzma): decompress it " in (
        refusal("zstd.7z")
    )
    assert "is Brotli-compressed, which hop does not read" in refusal("noise.br")
    job = str(ROOT / "jobs" / "wordcount.py")
    ran = hop("run", job, "notes.zip", "-o", "out", "--quiet", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    counts = sorted(line for part in (tmp_path / "out").glob("part-*") for line in part.read_text().splitlines())
    assert counts == ['"one"\t1', '"three"\t1', '"two"\t1']


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        ("plain.gz", b"one\ntwo\n", "is not gzip data: its first bytes are text, and hop reads a file whose name ends "
         ".gz decompressed; rename it without .gz to read it as text"),
        ("bzip2.gz", __import__("bz2").compress(b"one\ntwo\n"),
         "is bzip2 data (its first bytes are bzip2's), not gzip as its name says: rename it to end .bz2"),
        ("gzip.xz", gzip.compress(b"one\ntwo\n", mtime=0),  # (no time in it: every test process collects one id)
         "is gzip data (its first bytes are gzip's), not xz as its name says: rename it to end .gz"),
        ("zstd.bz2", b"\x28\xb5\x2f\xfd" + bytes(range(256)),
         "is Zstandard data (its first bytes are Zstandard's), not bzip2 as its name says: decompress it (unzstd)"),
    ],
    ids=["plain.gz", "bzip2.gz", "gzip.xz", "zstd.bz2"],
)  # fmt: skip
def test_a_file_whose_bytes_are_not_what_its_suffix_says_is_named_as_what_it_is(
    tmp_path: Path, name: str, data: bytes, said: str
) -> None:
    """A plain log named ``.gz``, or bzip2 data named ``.gz``, failed its map as "truncated, corrupt or not gzip
    data; check it with gzip -t": it names what the file is and the suffix to give."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError) as failure:
        list(iter_lines(Split(str(path), 0, -1)))
    assert f"input file {path} {said}" in str(failure.value), failure.value


@pytest.mark.skipif(
    not os.path.isfile("/proc/cpuinfo") or os.path.getsize("/proc/cpuinfo") != 0, reason="needs Linux's /proc"
)
def test_a_file_whose_size_says_0_bytes_yet_holds_data_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    """``hop run job.py /proc/cpuinfo`` read nothing (a file is read up to its size, and /proc's files give 0 bytes)
    and succeeded, saying that the input held no records. It is refused, saying to copy the file; an empty file is
    still an empty input."""
    with pytest.raises(InputError) as refused:
        expand_inputs(["/proc/cpuinfo"])
    assert str(refused.value) == (
        "input file /proc/cpuinfo gives its size as 0 bytes yet holds data (a file of /proc or /sys, made as it is "
        "read): hop reads a file up to its size, so it would read none of it; copy it to a file (cat /proc/cpuinfo "
        "> FILE) and read that"
    )
    (tmp_path / "empty.txt").write_bytes(b"")
    assert expand_inputs([str(tmp_path)]) == [str(tmp_path / "empty.txt")]


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("logs.tar", "w"),
        ("logs.tar.gz", "w:gz"),
        ("logs.tar.bz2", "w:bz2"),
        ("logs.tgz", "w:gz"),  # (was named as gzip data, "rename it to end .gz")
        ("logs.tbz2", "w:bz2"),
        ("logs.txz", "w:xz"),
    ],
)
@pytest.mark.parametrize("tar_format", ["ustar", "gnu"])
def test_a_tar_archive_is_named_as_one_not_read_as_text(tmp_path: Path, name: str, mode: str, tar_format: str) -> None:
    """A tar archive's headers are ASCII and NUL bytes, valid UTF-8: ``hop run wc.py logs.tar.gz`` counted its
    file names, modes and padding as words beside the lines of the files inside, and succeeded. Its map fails now,
    naming the archive and how to extract it, ``--skip-bad-records`` or not; text is still text."""
    import tarfile

    (tmp_path / "log.txt").write_text("a b\nc d\n")
    path = tmp_path / name
    with tarfile.open(path, mode, format=tarfile.USTAR_FORMAT if tar_format == "ustar" else tarfile.GNU_FORMAT) as tar:
        tar.add(tmp_path / "log.txt", arcname="log.txt")
    split = Split(str(path), 0, -1)
    for on_bad in (None, lambda position, line, error: None):
        with pytest.raises(InputError) as failure:
            list(iter_lines(split, on_bad=on_bad))
        assert str(failure.value) == (
            f"input file {path} is a tar archive (it starts with a tar header): read as text, its headers would be "
            f"records too; extract it (tar xf {path}) and read the files it holds"
        )
    text = tmp_path / "ustar.txt"
    text.write_text("".join(f"line {n} of the word ustar and others\n" for n in range(40)))
    assert len(list(iter_lines(Split(str(text), 0, -1)))) == 40


def test_gzip_text_named_tgz_is_read_decompressed(tmp_path: Path) -> None:
    """``.tgz`` (and ``.tbz2``, ``.txz``) name compressed data: read decompressed, as ``.gz`` is."""
    import gzip

    path = tmp_path / "lines.tgz"
    path.write_bytes(gzip.compress(b"a b\nc\n"))
    assert list(iter_lines(Split(str(path), 0, -1))) == [(0, "a b"), (4, "c")]


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".lzma"])
def test_an_empty_compressed_file_is_refused_naming_it_not_read_as_no_records(tmp_path: Path, suffix: str) -> None:
    """A 0-byte ``.gz`` is no gzip data at all (``gzip -t``: "unexpected end of file"), yet Python's gzip reads it as
    no text: the job succeeded with "the input held no records" (``.bz2`` and ``.xz`` were never opened, as 0-byte
    files make no split). It is now refused, in a directory too, naming the file, the check and what to do; the
    compression of an empty text (a header and a trailer) is still an empty input."""
    import bz2
    import gzip
    import lzma

    tool = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".lzma": "xz"}[suffix]
    folder = tmp_path / "logs"
    folder.mkdir()
    empty = folder / f"day{suffix}"
    empty.write_bytes(b"")
    for given in (str(empty), str(folder)):
        with pytest.raises(InputError) as refused:
            hop.inputs.expand_inputs([given])
        assert str(refused.value) == (
            f"input file {empty}: cannot decompress it: it is empty (0 bytes), while {tool} data starts with a "
            f"header, so the file is truncated or was never written (`{tool} -t {empty}` fails on it); write it "
            "again, or remove it (or leave it out of the input) if it holds nothing"
        )
    format = lzma.FORMAT_ALONE if suffix == ".lzma" else lzma.FORMAT_XZ
    compress = {".gz": gzip.compress, ".bz2": bz2.compress}.get(suffix, lambda data: lzma.compress(data, format))
    empty.write_bytes(compress(b""))
    assert hop.inputs.expand_inputs([str(folder)]) == [str(empty)]


@pytest.mark.parametrize("engine", ["hop", "spark"])
def test_a_run_over_an_empty_gz_file_is_refused_before_it_clears_the_old_output(tmp_path: Path, engine: str) -> None:
    """``hop run`` over a 0-byte ``.gz`` succeeded (exit code 0, "the input held no records"), on either engine: it
    is now refused before the job starts (exit code 2), so ``--overwrite`` leaves the old output as it was."""
    from tests.conftest import ROOT, hop

    (tmp_path / "logs.txt.gz").write_bytes(b"")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "part-00000").write_text("kept\n")
    job = str(ROOT / "jobs" / "wordcount.py")
    ran = hop("run", job, "logs.txt.gz", "-o", "out", "--overwrite", "--engine", engine, cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    assert f"input file {tmp_path / 'logs.txt.gz'}: cannot decompress it: it is empty (0 bytes)" in ran.stderr
    assert "held no records" not in ran.stderr, ran.stderr
    assert (tmp_path / "out" / "part-00000").read_text() == "kept\n"


def test_a_name_that_is_not_utf8_is_refused_before_the_job(tmp_path: Path) -> None:
    """A file named in Latin-1 (``caf\\xe9.txt``) in an input directory, or such an output directory, failed the job
    as an internal error with the coordinator's traceback (msgpack cannot carry the name's surrogate escapes); it
    is now refused before anything runs, naming the bytes."""
    from hop.outputs import OutputError, check_output

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "ok.txt").write_text("a\n")
    latin1 = os.fsdecode(os.fsencode(folder) + b"/caf\xe9.txt")
    Path(latin1).write_text("b\n")
    with pytest.raises(InputError, match=r"input file b'.*/caf\\xe9\.txt': its name is not valid UTF-8"):
        hop.inputs.expand_inputs([str(folder)])
    with pytest.raises(OutputError, match=r"output directory b'.*/out\\xff': its name is not valid UTF-8"):
        check_output(os.fsdecode(os.fsencode(tmp_path) + b"/out\xff"), overwrite=False)


def test_a_ctrl_c_as_the_standard_input_copy_is_made_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctrl_c_as_scratch_is_made: None
) -> None:
    """``hop run JOB - -o OUT`` copies standard input into ``.OUT.stdin-*``: a Ctrl-C that came as that folder was
    made (before it was recorded for removal) left it behind, and without its owner file no later run removed it
    either. The Ctrl-C still interrupts the run, and the folder goes."""
    import io

    import hop.spilldirs
    import hop.stdin_input

    stream = io.BytesIO(b"a b\n")
    with pytest.raises(KeyboardInterrupt), hop.stdin_input.stdin_as_file(["-"], str(tmp_path / "out"), stream):
        pass
    assert list(tmp_path.iterdir()) == []
    # Interrupted while marking a folder as its own, make_spill_dir removes it (nothing else would).
    monkeypatch.setattr(hop.spilldirs.psutil, "Process", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        hop.spilldirs.make_scratch(tmp_path, "out", "stdin")
    assert list(tmp_path.iterdir()) == []


def test_a_glob_leaves_out_the_output_being_written_and_hidden_levels_and_reads_starstar_at_any_depth(
    tmp_path: Path,
) -> None:
    """``hop run JOB 'data/*' -o data/out`` was refused: the run makes ``data/out`` (empty) before it lists its
    inputs, and the glob matched it ("input directory data/out holds no file to read"), though a directory input
    leaves the output out. ``data/**/*.txt`` matched only one level down (``**`` read as ``*``), and
    ``data/*/x.txt`` read ``data/_old/x.txt``, which ``data/`` leaves out."""
    from hop.inputs import expand_inputs

    data = tmp_path / "data"
    for name in ("a.txt", "day-1/b.txt", "day-1/deep/c.txt", "_old/b.txt", "_old/deep/c.txt"):
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("x\n")
    (data / "out").mkdir()  # the job's output, as claimed before the inputs are listed

    def found(pattern: str, output: str | None = None) -> list[str]:
        return [str(Path(p).relative_to(data)) for p in expand_inputs([str(data / pattern)], output)]

    assert found("*", output=str(data / "out")) == ["a.txt", "day-1/b.txt", "day-1/deep/c.txt"]
    (data / "out" / "part-00000").write_text("being written\n")
    assert found("*/*", output=str(data / "out")) == ["day-1/b.txt", "day-1/deep/c.txt"]
    assert found("*/part-*") == ["out/part-00000"]  # (no output given: a finished job's output is input like any)
    assert found("**/*.txt") == ["a.txt", "day-1/b.txt", "day-1/deep/c.txt"]
    assert found("*/b.txt") == ["day-1/b.txt"]
    assert found("_old/*/*.txt") == ["_old/deep/c.txt"]  # named in the pattern: read


def test_a_file_removed_after_it_was_listed_is_named_so(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\n")
    (split,) = make_splits([str(path)], 10)
    path.unlink()
    with pytest.raises(InputError, match=r"in.txt no longer exists: it was removed or renamed while the job ran"):
        list(iter_lines(split))


@pytest.mark.parametrize("left", [0, 5, 14])
def test_a_file_that_shrank_after_it_was_split_is_named_not_read_short(tmp_path: Path, left: int) -> None:
    """A file truncated or rewritten shorter while the job ran was read to its new end, and the splits past it read
    nothing: the job succeeded without the lines it lost."""
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\ntwo\nthree\nfour\n")
    first, second = make_splits([str(path)], 10)
    path.write_bytes(path.read_bytes()[:left])
    for split in (second,) if left >= first.end else (first, second):
        with pytest.raises(InputError, match=rf"in.txt is now {left} bytes, and its split .*truncated or rewritten"):
            list(iter_lines(split))


def test_a_file_named_twice_is_read_once_and_said_so(tmp_path: Path) -> None:
    from hop.inputs import expand_inputs, repeated_inputs

    (tmp_path / "data").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "data" / name).write_text("x\n")
    a, b = (str(tmp_path / "data" / name) for name in ("a.txt", "b.txt"))
    named = [str(tmp_path / "data" / "*.txt"), a, f"{tmp_path}/./data/../data/b.txt", str(tmp_path / "data")]
    assert expand_inputs(named) == [a, b]
    assert repeated_inputs(named) == [
        f"input file {a} is named 3 times ({named[0]!r}, {named[1]!r} and {named[3]!r}): it is read once",
        f"input file {b} is named 3 times ({named[0]!r}, {named[2]!r} and {named[3]!r}): it is read once",
    ]
    assert repeated_inputs([a, b]) == []
    assert repeated_inputs([str(tmp_path / "**")]) == []  # (matches data/ and data/a.txt: one pattern, no repeat)
    assert repeated_inputs([a, a]) == [f"input file {a} is named 2 times ({a!r} twice): it is read once"]
    assert repeated_inputs([a, named[0], a, a]) == [
        f"input file {a} is named 4 times ({a!r} 3 times and {named[0]!r}): it is read once"
    ]


def test_a_file_reached_again_through_a_symbolic_link_is_read_once(tmp_path: Path) -> None:
    """A log directory's ``latest.log`` link to one of its files doubled that file's records without a word (a
    directory reached again through a link was read once already); a link named beside its target was read twice
    where ``./a.txt`` beside ``a.txt`` was read once, with a warning. Each is read once now, where first found, and
    the named one is warned of."""
    from hop.inputs import expand_inputs, repeated_inputs

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "app-1.log").write_text("x\n")
    (logs / "app-2.log").write_text("y\n")
    (logs / "latest.log").symlink_to("app-2.log")
    assert expand_inputs([str(logs)]) == [str(logs / "app-1.log"), str(logs / "app-2.log")]
    assert repeated_inputs([str(logs)]) == []  # (one pattern names it twice: no repeat of the user's)
    (tmp_path / "link.txt").symlink_to(logs / "app-1.log")
    named = [str(logs / "app-1.log"), str(tmp_path / "link.txt")]
    assert expand_inputs(named) == [str(logs / "app-1.log")]
    assert repeated_inputs(named) == [
        f"input file {logs / 'app-1.log'} is named 2 times ({named[0]!r} and {named[1]!r}): it is read once"
    ]


def test_a_binary_file_is_named_binary_not_only_badly_encoded(tmp_path: Path) -> None:
    """A binary file among the inputs failed with "re-encode the file as UTF-8", which cannot mend it; a line
    holding NUL bytes (binary, or UTF-16 text) says what to do for either."""
    path = tmp_path / "app.bin"
    path.write_bytes(b"text first\n\x7fELF\x02\x01\x00\x00\xff\xfe\n")
    with pytest.raises(InputError) as refused:
        list(iter_lines(Split(str(path), 0, -1)))
    assert str(refused.value) == (
        f"input file {path}: line at byte offset 11 is not valid UTF-8 (byte 19: invalid start byte); it holds NUL "
        "bytes: if it is binary, leave it out of the inputs (in an input directory, a name starting with _ is left "
        "out); if it is UTF-16 text, re-encode it as UTF-8"
    )


@pytest.mark.parametrize(
    ("encoding", "named", "told"),
    [
        (
            "utf-16-le",
            "UTF-16LE",
            "without a byte order mark: NUL bytes between its letters, which would be read as NUL characters",
        ),
        (
            "utf-16-be",
            "UTF-16BE",
            "without a byte order mark: NUL bytes between its letters, which would be read as NUL characters",
        ),
        ("utf-16", "UTF-16", "it starts with a UTF-16 byte order mark"),
        ("utf-32", "UTF-32", "it starts with a UTF-32 byte order mark"),
    ],
)
def test_utf16_or_utf32_text_is_named_as_such(tmp_path: Path, encoding: str, named: str, told: str) -> None:
    """UTF-16 text without a byte order mark is valid UTF-8 (NUL is a character): a word count read it without an
    error and counted words with NULs between their letters. Such text, and UTF-16 or UTF-32 text with its mark
    (which failed at its first line as "not valid UTF-8"), are named with the command that re-encodes them, even
    with bad records skipped; an mrjob job's bytes are kept as they are, for its protocols."""
    path = tmp_path / "notes.txt"
    path.write_bytes("first line of notes\nsecond line\n".encode(encoding))
    for on_bad in (None, lambda position, line, error: None):
        with pytest.raises(InputError) as refused:
            list(iter_lines(Split(str(path), 0, -1), on_bad=on_bad))
        assert str(refused.value) == (
            f"input file {path} is {named} text ({told}): hop reads UTF-8; re-encode it (iconv -f {named} -t "
            f"UTF-8 {path} > FILE) and read that"
        )
    if encoding == "utf-16-le":
        kept = list(iter_lines(Split(str(path), 0, -1), fallback_encoding=KEEP_BYTES))
        assert kept and kept[0][1].startswith("f\x00i\x00"), kept
    plain = tmp_path / "plain.txt"
    plain.write_text("a\n" + "x" * 5000 + "\n")  # (no NUL: text)
    assert len(list(iter_lines(Split(str(plain), 0, -1)))) == 2


def test_an_empty_name_is_refused_not_read_as_the_current_directory(tmp_path: Path) -> None:
    from hop.inputs import expand_inputs
    from hop.outputs import OutputError, check_output

    (tmp_path / "in.txt").write_text("x\n")
    with pytest.raises(InputError, match=r"an input is an empty name \(an unset shell variable\?\)"):
        expand_inputs([str(tmp_path / "in.txt"), ""])
    with pytest.raises(OutputError, match=r"the output directory is an empty name"):
        check_output("", overwrite=True)


def test_a_file_whose_name_holds_glob_characters_is_read_by_its_name(tmp_path: Path) -> None:
    """``data[1].txt`` was taken for a glob matching ``data1.txt``: "matches no file", though the file is there."""
    from hop.inputs import expand_inputs

    for name in ("data[1].txt", "star*.txt", "starry.txt"):
        (tmp_path / name).write_text("x\n")
    assert expand_inputs([str(tmp_path / "data[1].txt")]) == [str(tmp_path / "data[1].txt")]
    assert expand_inputs([str(tmp_path / "star*.txt")]) == [str(tmp_path / "star*.txt")]  # the name, not the glob
    assert expand_inputs([str(tmp_path / "sta?ry.txt")]) == [str(tmp_path / "starry.txt")]  # no such name: a glob


@pytest.mark.parametrize("change", ["same size", "grown", "replaced", "gz rewritten", "gz appended"])
def test_a_file_changed_after_it_was_split_is_named_not_read_mixed(tmp_path: Path, change: str) -> None:
    """A file rewritten at the same size, or grown, after the job cut it was read as it then was: the splits read
    before the change had the old lines and those after it the new ones, and nothing said so."""
    import gzip

    path = tmp_path / ("in.txt.gz" if change.startswith("gz") else "in.txt")
    old = b"one\ntwo\nthree\nfour\n"
    path.write_bytes(gzip.compress(old) if change.startswith("gz") else old)
    splits = make_splits([str(path)], 10)
    then = path.stat().st_mtime_ns
    if change == "replaced":
        (tmp_path / "new.txt").write_bytes(old.upper())
        os.replace(tmp_path / "new.txt", path)
    elif change == "gz appended":  # (a gzip member added: read, as the file is read whole)
        path.write_bytes(path.read_bytes() + gzip.compress(b"five\n"))
    else:
        new = old.upper() + (b"five\n" if change == "grown" else b"")
        path.write_bytes(gzip.compress(new) if change == "gz rewritten" else new)
    os.utime(path, ns=(then + 10**9, then + 10**9))  # (a rewrite within the clock's tick keeps its mtime)
    for split in splits:
        with pytest.raises(InputError, match=r"in.txt(.gz)? changed while the job ran: it was .* run the job again"):
            list(iter_lines(split))


def test_a_file_changed_while_its_split_was_read_is_named(tmp_path: Path) -> None:
    """The check where a split has been read: a rewrite after the split was opened, at the same size."""
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\ntwo\n")
    (split,) = make_splits([str(path)], 1 << 20)
    lines = iter_lines(split)
    assert next(lines) == (0, "one")
    path.write_bytes(b"ONE\nTWO\n")
    os.utime(path, ns=(split.stamp.mtime_ns + 10**9,) * 2)  # type: ignore[union-attr]
    with pytest.raises(InputError, match=r"in.txt changed while the job ran: it was rewritten or touched \(same size"):
        list(lines)


def test_a_file_appended_to_after_it_was_split_is_read_up_to_its_size_then(tmp_path: Path) -> None:
    """Lines appended to a log while the job runs are not read, as documented, and fail nothing."""
    path = tmp_path / "in.txt"
    path.write_bytes(b"x" * 5000 + b"\none\ntwo\n")
    splits = make_splits([str(path)], 2600)
    with open(path, "ab") as file:
        file.write(b"three\n")
    os.utime(path, ns=(splits[0].stamp.mtime_ns + 10**9,) * 2)  # type: ignore[union-attr]
    assert [line for split in splits for _, line in iter_lines(split)] == ["x" * 5000, "one", "two"]


def test_a_job_whose_input_is_rewritten_while_a_map_reads_it_fails_naming_it(client: Client, tmp_path: Path) -> None:
    """A run whose input was rewritten at the same size while its map read it succeeded, its output counting the
    old version's first line and the new version's others."""
    source = tmp_path / "in.txt"
    source.write_text("".join(f"line {n}\n" for n in range(2_000)))
    with pytest.raises(JobFailed, match=rf"input file {source} changed while the job ran: it was rewritten or touched"):
        run_job(client, "rewriting_map", [source], tmp_path / "out")


@needs_spark
def test_a_spark_map_whose_input_is_rewritten_while_it_reads_fails_naming_it_as_on_hop(tmp_path: Path) -> None:
    """Spark's map task reads its splits with the same reader: the split made when the job started keeps the file's
    stamp (run here, outside Spark)."""
    from tests.test_spark import map_failure

    source = tmp_path / "in.txt"
    source.write_text("".join(f"line {n}\n" for n in range(2_000)))
    reason, shown = map_failure("rewriting_map", None, 0, "text", make_splits([str(source)], 1 << 20))
    assert reason.startswith(f"map task 0: input file {source} changed while the job ran: it was rewritten"), reason
    assert shown is None


@pytest.mark.parametrize(
    ("name", "compress", "said"),
    [
        (
            "logs.txt",
            gzip.compress,
            "the file is gzip data (its first bytes are gzip's), read as text since its name does not say so: "
            "rename it to end .gz",
        ),
        ("logs.log", lambda data: __import__("bz2").compress(data), "is bzip2 data (its first bytes are bzip2's)"),
        ("logs", lambda data: __import__("lzma").compress(data), "is xz data (its first bytes are xz's)"),
    ],
)
def test_compressed_data_without_its_suffix_is_named_as_such_and_never_skipped(
    tmp_path: Path, name: str, compress: object, said: str
) -> None:
    """A gzip file named ``.txt`` was read as text: its first line "is not valid UTF-8 ...; re-encode the file as
    UTF-8", which would not mend it, and --skip-bad-records skipped its undecodable lines and read the others,
    compressed bytes that happen to be UTF-8, as records. It names the compression and the suffix to give, and is
    not skipped."""
    data = "".join(f"line {number} of some text\n" for number in range(20_000)).encode()
    path = tmp_path / name
    path.write_bytes(compress(data))  # type: ignore[operator]
    split = Split(str(path), 0, path.stat().st_size)
    with pytest.raises(InputError) as failure:
        list(iter_records(split, "text"))
    assert said in str(failure.value) and "re-encode" not in str(failure.value), failure.value
    skipped: list[int] = []
    with pytest.raises(InputError) as failure:
        list(iter_records(split, "text", on_bad=lambda position, line, error: skipped.append(position)))
    assert said in str(failure.value) and not skipped, (failure.value, skipped)
