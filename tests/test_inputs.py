"""Reading text splits: every line exactly once, with its byte offset, whatever the split and chunk boundaries."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import hop.inputs
from hop.inputs import MIN_SPLIT_BYTES, InputError, Split, iter_lines, iter_records, make_splits, split_size_for


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


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk_bytes", [7, 64, 1 << 22])
def test_splits_read_every_line_once_with_its_byte_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, chunk_bytes: int
) -> None:
    rng = random.Random(seed)
    data = random_text(rng, 400)
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    monkeypatch.setattr(hop.inputs, "CHUNK_BYTES", chunk_bytes)
    expected = reference_lines(data)
    for split_size in (1, 13, 100, 1000, len(data)):
        got = [pair for split in make_splits([str(path)], split_size) for pair in iter_lines(split)]
        assert got == expected, f"split size {split_size}"
    # Arbitrary cut points, not only the even ones make_splits chooses.
    cuts = sorted({0, len(data), *(rng.randrange(len(data)) for _ in range(9))})
    splits = [Split(str(path), lo, hi - lo) for lo, hi in zip(cuts, cuts[1:], strict=False) if hi > lo]
    assert [pair for split in splits for pair in iter_lines(split)] == expected


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


def test_overlong_line_is_refused_with_its_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hop.inputs, "CHUNK_BYTES", 16)
    path = tmp_path / "input.txt"
    path.write_bytes(b"short\n" + b"x" * 1000 + b"\nshort again\n")
    split = Split(str(path), 0, path.stat().st_size)
    with pytest.raises(InputError, match=r"line at byte offset 6 is longer than 500 bytes; raise --max-line-bytes"):
        list(iter_lines(split, max_line_bytes=500))
    assert [line for _, line in iter_lines(split, max_line_bytes=1000)] == ["short", "x" * 1000, "short again"]


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown input format"):
        list(iter_records(Split("x", 0, 1), "parquet"))
