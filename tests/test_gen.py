"""Tests of the seeded data generators in hop.gen (text, pageviews, the ``gen`` command)."""

from __future__ import annotations

import argparse
import collections
import gzip
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hop.gen import generate_pageviews, generate_text, generate_text_files, parse_size
from hop.gen.cli import register

# ---------------------------------------------------------------------------------------------------- text


def _words(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split()


def test_text_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    a = generate_text(tmp_path / "a.txt", 200_000, seed=7, vocabulary=5_000)
    b = generate_text(tmp_path / "b.txt", 200_000, seed=7, vocabulary=5_000)
    c = generate_text(tmp_path / "c.txt", 200_000, seed=8, vocabulary=5_000)
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    assert (tmp_path / "a.txt").read_bytes() != (tmp_path / "c.txt").read_bytes()
    assert a == {**b, "path": a["path"]}
    assert c["bytes"] > 0


@pytest.mark.parametrize("size", [5_000, 123_457, 1_000_000])
@pytest.mark.parametrize("distribution", ["zipf", "uniform"])
def test_text_size_and_line_shape(tmp_path: Path, size: int, distribution: str) -> None:
    path = tmp_path / "t.txt"
    summary = generate_text(path, size, vocabulary=2_000, words_per_line=7, distribution=distribution)
    data = path.read_bytes()
    assert summary["bytes"] == len(data)
    assert 0.99 * size <= len(data) <= size
    lines = data.split(b"\n")
    assert lines[-1] == b""  # ends with a newline
    assert summary["lines"] == len(lines) - 1
    assert all(len(line.split(b" ")) == 7 for line in lines[:-1])
    assert summary["words"] == 7 * summary["lines"]


def test_text_tiny_and_zero_sizes(tmp_path: Path) -> None:
    assert generate_text(tmp_path / "z.txt", 0)["bytes"] == 0
    assert (tmp_path / "z.txt").read_bytes() == b""
    summary = generate_text(tmp_path / "s.txt", 3, words_per_line=1, vocabulary=10)
    assert summary["bytes"] <= 3


def test_zipf_rank_frequency_is_about_one_over_rank(tmp_path: Path) -> None:
    path = tmp_path / "z.txt"
    generate_text(path, 2_000_000, vocabulary=10_000, seed=3)
    counts = np.array(sorted(collections.Counter(_words(path)).values(), reverse=True), dtype=float)
    assert counts[0] > 50 * counts[99]  # 1/r predicts a ratio of 100
    ranks = np.arange(1, 501)
    slope = np.polyfit(np.log(ranks), np.log(counts[:500]), 1)[0]
    assert -1.15 < slope < -0.85
    # Steeper exponent: the head takes more of the mass.
    generate_text(tmp_path / "s.txt", 500_000, vocabulary=10_000, zipf_exponent=1.5)
    steep = collections.Counter(_words(tmp_path / "s.txt"))
    assert max(steep.values()) / sum(steep.values()) > counts[0] / counts.sum()


def test_uniform_is_flat(tmp_path: Path) -> None:
    path = tmp_path / "u.txt"
    generate_text(path, 1_000_000, vocabulary=1_000, distribution="uniform")
    counts = np.array(list(collections.Counter(_words(path)).values()), dtype=float)
    assert counts.size == 1_000  # every word drawn
    # ~150 draws per word: Poisson spread gives a coefficient of variation near 0.08.
    assert counts.std() / counts.mean() < 0.15
    assert counts.max() < 1.6 * counts.mean()


def test_text_is_utf8_with_some_non_ascii_words(tmp_path: Path) -> None:
    path = tmp_path / "u.txt"
    generate_text(path, 1_000_000, distribution="uniform", vocabulary=20_000)
    text = path.read_bytes().decode("utf-8")  # raises if not UTF-8
    words = set(text.split())
    non_ascii = [w for w in words if not w.isascii()]
    assert 0.01 < len(non_ascii) / len(words) < 0.08
    assert all(w == w.strip() and not any(c.isspace() for c in w) for w in words)
    scripts = "".join(non_ascii)
    assert re.search("[\u0400-\u04ff]", scripts)  # Cyrillic
    assert re.search("[\u3040-\u30ff\u4e00-\u9fff]", scripts)  # Japanese
    assert re.search("[éèüöäñçåøáíóú]", scripts)  # accented Latin
    assert text.count("\n") == sum(1 for _ in text.splitlines())  # no stray line breaks in words


def test_text_files_share_vocabulary_and_total(tmp_path: Path) -> None:
    out = tmp_path / "parts"
    summary = generate_text_files(out, 300_001, 3, vocabulary=3_000, seed=5)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["part-0000.txt", "part-0001.txt", "part-0002.txt"]
    sizes = [(out / n).stat().st_size for n in names]
    assert summary["bytes"] == sum(sizes)
    assert all(0.99 * 100_000 <= s <= 100_001 for s in sizes)
    contents = [(out / n).read_bytes() for n in names]
    assert len(set(contents)) == 3
    # Same vocabulary and ranks: the most frequent word is the same in every part.
    tops = {collections.Counter(c.decode().split()).most_common(1)[0][0] for c in contents}
    assert len(tops) == 1
    # File i does not depend on how many files follow it.
    generate_text_files(tmp_path / "two", 200_000, 2, vocabulary=3_000, seed=5)
    assert (tmp_path / "two" / "part-0000.txt").read_bytes()[:50_000] == contents[0][:50_000]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"size_bytes": -1},
        {"distribution": "normal"},
        {"vocabulary": 0},
        {"words_per_line": 0},
        {"zipf_exponent": -1.0},
    ],
)
def test_text_rejects_bad_arguments(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"size_bytes": 1_000, **kwargs}
    with pytest.raises(ValueError):
        generate_text(tmp_path / "x.txt", **args)


# ----------------------------------------------------------------------------------------------- pageviews

_Day = tuple[dict[str, Any], dict[int, list[tuple[str, str, int, int]]]]  # summary, hour -> rows
_NAME = re.compile(r"pagecounts-(\d{8})-(\d{2})0000\.gz")
_LANG = re.compile(r"[a-z]{2,3}(\.[a-z])?|simple|commons\.m")


def _gunzip(path: str) -> bytes:
    with gzip.open(path) as file:
        return file.read()


def _read_hours(paths: list[str]) -> dict[int, list[tuple[str, str, int, int]]]:
    """Hour of day -> parsed lines, checking the line format on the way."""
    hours: dict[int, list[tuple[str, str, int, int]]] = {}
    for path in paths:
        match = _NAME.fullmatch(Path(path).name)
        assert match, path
        rows = []
        with gzip.open(path, "rt", encoding="ascii") as lines:
            for line in lines:
                fields = line.rstrip("\n").split(" ")
                assert len(fields) == 4, line
                lang, title, views, size = fields
                assert _LANG.fullmatch(lang), lang
                assert title and not any(c.isspace() for c in title)
                assert views.isdigit() and size.isdigit() and int(views) >= 1 and int(size) >= 1, line
                rows.append((lang, title, int(views), int(size)))
        assert [(r[0], r[1]) for r in rows] == sorted((r[0], r[1]) for r in rows)  # sorted as in the dumps
        hours[int(match.group(2))] = rows
    return hours


@pytest.fixture(scope="module")
def one_day(tmp_path_factory: pytest.TempPathFactory) -> _Day:
    out = tmp_path_factory.mktemp("pageviews")
    summary = generate_pageviews(out, pages=5_000, size_bytes=600_000, seed=1)
    return summary, _read_hours(summary["paths"])


def test_pageviews_file_names_and_format(one_day: _Day) -> None:
    summary, hours = one_day
    names = [Path(p).name for p in summary["paths"]]
    assert names == [f"pagecounts-20090101-{h:02d}0000.gz" for h in range(24)]
    assert sorted(hours) == list(range(24))
    assert summary["lines"] == sum(len(rows) for rows in hours.values())
    assert summary["views"] == sum(r[2] for rows in hours.values() for r in rows)
    titles = {r[1] for rows in hours.values() for r in rows}
    assert any("%" in t for t in titles)  # percent-encoded non-ASCII
    assert any("_" in t for t in titles)
    assert ("en", "Main_Page") in {(r[0], r[1]) for r in hours[0]}


def test_pageviews_size_is_respected(one_day: _Day) -> None:
    summary, _ = one_day
    actual = sum(len(_gunzip(p)) for p in summary["paths"])
    assert actual == summary["bytes"]
    assert abs(actual - 600_000) < 0.05 * 600_000
    assert summary["compressed_bytes"] == sum(Path(p).stat().st_size for p in summary["paths"])


def test_pageviews_popular_pages_in_every_hour(one_day: _Day) -> None:
    summary, hours = one_day
    keys = [{(r[0], r[1]) for r in rows} for rows in hours.values()]
    always = set.intersection(*keys)
    assert len(always) >= summary["core_pages"] >= 50
    for page in [("en", "Main_Page"), ("en", "Special:Search"), ("de", "Wikipedia:Hauptseite")]:
        assert page in always
    # ...while the tail comes and goes.
    assert len(set.union(*keys)) > 3 * len(always)


def test_pageviews_language_mix(one_day: _Day) -> None:
    _, hours = one_day
    views: collections.Counter[str] = collections.Counter()
    for rows in hours.values():
        for lang, _title, count, _size in rows:
            views[lang] += count
    total = sum(views.values())
    assert 0.38 < views["en"] / total < 0.50
    ranked = [lang for lang, _ in views.most_common()]
    assert ranked[0] == "en" and {"de", "ja"} <= set(ranked[1:5])
    assert len(views) > 30
    assert any("." in lang for lang in views)  # sister projects such as en.d


def _peak_hour(hourly: list[int]) -> float:
    """Phase of the 24-hour harmonic: a noise-robust peak hour in [0, 24)."""
    angle = [2 * math.pi * h / 24 for h in range(24)]
    c = sum(v * math.cos(a) for v, a in zip(hourly, angle, strict=True))
    s = sum(v * math.sin(a) for v, a in zip(hourly, angle, strict=True))
    return (math.atan2(s, c) * 24 / (2 * math.pi)) % 24


def test_pageviews_daily_cycle_follows_time_zones(one_day: _Day) -> None:
    _, hours = one_day
    per_lang: dict[str, list[int]] = collections.defaultdict(lambda: [0] * 24)
    for hour, rows in hours.items():
        for lang, _title, count, _size in rows:
            per_lang[lang][hour] += count
    assert 11.5 < _peak_hour(per_lang["ja"]) < 14.5  # Japanese evening
    assert 17.5 < _peak_hour(per_lang["en"]) < 20.5  # American day, European evening
    assert 17.5 < _peak_hour(per_lang["de"]) < 20.5
    ja = per_lang["ja"]
    assert min(ja) < 0.6 * max(ja)  # a real swing, not noise


def test_pageviews_deterministic_multi_day_and_plain(tmp_path: Path) -> None:
    kwargs: dict[str, Any] = {"days": 2, "start": "2012-02-28", "pages": 2_000, "size_bytes": 150_000}
    a = generate_pageviews(tmp_path / "a", seed=4, **kwargs)
    b = generate_pageviews(tmp_path / "b", seed=4, **kwargs)
    c = generate_pageviews(tmp_path / "c", seed=5, **kwargs)
    names = [Path(p).name for p in a["paths"]]
    assert len(names) == 48
    assert names[0] == "pagecounts-20120228-000000.gz" and names[-1] == "pagecounts-20120229-230000.gz"
    assert [Path(p).read_bytes() for p in a["paths"]] == [Path(p).read_bytes() for p in b["paths"]]
    assert [Path(p).read_bytes() for p in a["paths"]] != [Path(p).read_bytes() for p in c["paths"]]
    plain = generate_pageviews(tmp_path / "p", seed=4, compress=False, **kwargs)
    assert Path(plain["paths"][0]).name == "pagecounts-20120228-000000"
    assert Path(plain["paths"][5]).read_bytes() == _gunzip(a["paths"][5])


def test_pageviews_default_lines_per_hour(tmp_path: Path) -> None:
    summary = generate_pageviews(tmp_path, pages=2_000, compress=False)
    assert abs(summary["lines"] / 24 - 400) < 40  # pages // 5 lines per hour by default


def test_pageviews_grows_the_default_universe_for_large_sizes_and_refuses_fewer_pages_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``pages`` the universe grows to keep tail pages sparse at a large size; ``pages`` given is a bound, so
    a size it cannot give is refused, naming how many pages would do (it was grown past the bound given)."""
    import hop.gen.pageviews

    monkeypatch.setattr(hop.gen.pageviews, "DEFAULT_PAGES", 500)  # (the default's 200,000 would take 75 MB a day)
    summary = generate_pageviews(tmp_path / "grown", size_bytes=1_000_000, compress=False)
    assert summary["universe"] > 500 and summary["pages"] <= summary["universe"]
    assert abs(summary["bytes"] - 1_000_000) < 50_000
    with pytest.raises(ValueError, match=r"more than --pages 500 list .*; give --pages 2,646 or more, or a smaller"):
        generate_pageviews(tmp_path / "bound", pages=500, size_bytes=1_000_000, compress=False)
    assert not (tmp_path / "bound").exists()
    exact = generate_pageviews(tmp_path / "exact", pages=2_646, size_bytes=1_000_000, compress=False)
    assert exact["universe"] == 2_646 and abs(exact["bytes"] - 1_000_000) < 50_000


@pytest.mark.parametrize("pages", [1, 50, 2_000])
def test_pageviews_lists_at_most_the_pages_given_and_says_how_many_it_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pages: int
) -> None:
    """``--pages 50`` made a universe of 178 pages (every one of 53 languages got 3 at least), and the summary said
    "178 pages", which the files did not hold either (80 distinct ones). The universe is the number given, and the
    summary says how many distinct pages the files list, of how many."""
    args = _parser().parse_args(["gen", "pageviews", str(tmp_path), "--pages", str(pages), "--no-gzip"])
    assert args.func(args) == 0
    listed = {tuple(line.split(" ")[:2]) for path in tmp_path.iterdir() for line in path.read_text().splitlines()}
    assert 0 < len(listed) <= pages
    noun = "page" if len(listed) == 1 else "pages"
    assert f"views, {len(listed):,} distinct {noun} of {pages:,}) to {tmp_path} in" in capsys.readouterr().err


def _language_totals(summary: dict[str, Any]) -> list[collections.Counter[str]]:
    totals = []
    for path in summary["paths"]:
        counter: collections.Counter[str] = collections.Counter()
        for line in _gunzip(path).decode("ascii").splitlines():
            lang, _title, views, _size = line.split(" ")
            counter[lang] += int(views)
        totals.append(counter)
    return totals


def test_pageviews_counts_are_at_the_real_scale_whatever_the_file_size(tmp_path: Path) -> None:
    # Two days of small files: a few hundred lines an hour, yet millions of views, and a language's total at
    # the same hour of both days differs by traffic (weekday, noise, drift of popular pages), not by which of
    # its tail pages happened to be listed.
    kwargs: dict[str, Any] = {"days": 2, "start": "2009-01-05", "pages": 5_000, "size_bytes": 400_000, "seed": 2}
    summary = generate_pageviews(tmp_path / "real", **kwargs)
    assert summary["lines"] / 48 < 500
    assert 3_000_000 < summary["views"] / 48 < 7_000_000  # default views_per_hour 5,000,000 at mean traffic
    totals = _language_totals(summary)
    for lang in ("en", "de", "ja", "es", "fr"):
        for hour in range(24):
            first, second = totals[hour][lang], totals[24 + hour][lang]
            assert abs(first - second) / first < 0.4, (lang, hour, first, second)
    assert abs(summary["bytes"] - 400_000) < 0.05 * 400_000
    few = generate_pageviews(tmp_path / "few", views_per_hour=None, **kwargs)  # counts at the listing's scale
    assert few["views"] < summary["views"] / 100


@pytest.mark.parametrize(
    "kwargs", [{"days": 0}, {"start": "2009-13-01"}, {"size_bytes": 0}, {"pages": 0}, {"views_per_hour": 0}]
)
def test_pageviews_rejects_bad_arguments(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        generate_pageviews(tmp_path, **kwargs)


# ----------------------------------------------------------------------------------------------------- cli


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1000", 1000),
        ("150MB", 150_000_000),
        ("150M", 150_000_000),
        ("150mb", 150_000_000),
        ("10k", 10_000),
        ("10KB", 10_000),
        ("1.5GB", 1_500_000_000),
        ("2G", 2_000_000_000),
        ("64KiB", 65_536),
        ("1MiB", 1_048_576),
        (" 3 MB ", 3_000_000),
        ("0", 0),
        ("12B", 12),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "abc", "-5", "1.5", "10XB", "10 M B", "1e6", "5ib"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size") as refused:
        parse_size(text)
    assert ("a size cannot be negative" in str(refused.value)) == text.startswith("-")


FORM = "use a number with an optional unit K, KB, M, MB, G, GB (or KiB...), e.g. 150MB"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["gen", "text", "t.txt", "--size", "-5MB"], "--size: invalid size '-5MB': a size cannot be negative"),
        (["gen", "text", "t.txt", "--size=-5MB"], "--size: invalid size '-5MB': a size cannot be negative"),
        (["gen", "text", "t.txt", "--size", "-1"], "--size: invalid size '-1': a size cannot be negative"),
        (["gen", "text", "t.txt", "--size", "0"], "--size: invalid size '0': must be above zero"),
        (["gen", "text", "t.txt", "--size", "5XB"], "--size: invalid size '5XB'"),
        (["gen", "pageviews", "pv", "--size", "-1.5GB"], "--size: invalid size '-1.5GB': a size cannot be negative"),
        (["run", "j.py", "in", "-o", "o", "--split-size", "-1MB"], "--split-size: invalid size '-1MB': a size cannot"),
        (
            ["submit", "j.py", "in", "-o", "o", "--reduce-memory", "-.5MB", "--coordinator", "ipc:///x"],
            "--reduce-memory",
        ),
        (["run", "j.py", "in", "-o", "o", "--max-line-bytes", "-1KiB"], "--max-line-bytes: invalid size '-1KiB'"),
        (["run", "j.py", "in", "-o", "o", "--chunk-size", "-64KB"], "--chunk-size: invalid size '-64KB'"),
        (["compare", "j.py", "in", "--split-size", "-1MB"], "--split-size: invalid size '-1MB': a size cannot"),
        (["spark-engine", "j.py", "in", "-o", "o", "--split-size", "-1MB"], "--split-size: invalid size '-1MB'"),
    ],
)
def test_a_negative_zero_or_unreadable_size_is_refused_naming_the_option_and_the_form(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """``hop gen text OUT --size -5MB`` was refused with argparse's "argument --size: expected one argument" (it
    read ``-5MB`` as an option), saying nothing of the size, as was every size option given a negative size with a
    unit (``--split-size -1MB``); ``--size=-5MB`` said "invalid size" without saying why. Each spelling now names
    the option, what is wrong with the size and the form a size takes."""
    from hop import cli, spark_cli

    parser = spark_cli.build_parser() if argv[0] == "spark-engine" else cli.build_parser()
    with pytest.raises(SystemExit) as ended:
        parser.parse_known_args(argv[1:] if argv[0] == "spark-engine" else argv)
    assert ended.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert f"error: argument {said}" in error and error.endswith(FORM), error


def test_a_value_that_starts_with_a_minus_and_a_digit_reaches_its_option_as_a_plain_number_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not only sizes: a negative duration (``--lateness -2s``) was "expected one argument" too; it is now said
    what a duration must be. An input named like one is an input, as ``-5`` was."""
    from hop import cli

    with pytest.raises(SystemExit):
        cli.build_parser(continuous=True).parse_known_args(["run", "j.py", "-o", "o", "--lateness", "-2s"])
    assert "argument --lateness: a duration must be 0 or more seconds, got '-2s'" in capsys.readouterr().err
    args, unknown = cli.build_parser().parse_known_args(["run", "j.py", "-5MB", "-o", "o"])
    assert args.inputs == ["-5MB"] and unknown == []


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hop")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.txt"
    args = _parser().parse_args(["gen", "text", str(out), "--size", "20KB", "--seed", "2", "--uniform"])
    assert args.func(args) == 0
    assert 19_800 <= out.stat().st_size <= 20_000
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lines" in err
    args = _parser().parse_args(["gen", "text", str(tmp_path / "d"), "--size", "30K", "--files", "3"])
    assert args.func(args) == 0
    assert len(list((tmp_path / "d").glob("part-*.txt"))) == 3
    assert re.search(r"wrote 29\.\d KB", capsys.readouterr().err)  # (was "0.0 MB")


def test_cli_refuses_a_file_in_the_way_of_its_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file where the output directory goes failed with "[Errno 17] File exists" and exit code 1."""
    (tmp_path / "taken").write_text("")
    for argv in (["text", "taken", "--size", "1KB", "--files", "2"], ["text", "taken/x.txt", "--size", "1KB"]):
        args = _parser().parse_args(["gen", *[str(tmp_path / a) if a.startswith("taken") else a for a in argv]])
        assert args.func(args) == 2
        assert "taken exists and is not a directory: choose another output path" in capsys.readouterr().err
    args = _parser().parse_args(["gen", "pageviews", str(tmp_path / "taken"), "--size", "10KB"])
    assert args.func(args) == 2


def test_cli_names_a_directory_or_a_file_it_cannot_write_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hop gen text DIR`` wrote the whole file, then failed with "[Errno 21] Is a directory: '.DIR.partial' ->
    'DIR'" and exit code 1; a file it could not write was named by its hidden ``.NAME.partial``."""
    args = _parser().parse_args(["gen", "text", str(tmp_path), "--size", "1KB"])
    assert args.func(args) == 2
    assert capsys.readouterr().err == (
        f"hop gen text: error: {tmp_path} is a directory: give the name of a file to write, or --files N to write N "
        "files into it\n"
    )
    too_long = tmp_path / ("w" * 250)  # (its partial name is past the file system's 255 bytes)
    args = _parser().parse_args(["gen", "text", str(too_long), "--size", "1KB"])
    assert args.func(args) == 1
    assert capsys.readouterr().err == f"hop gen text: error: cannot write {too_long}: File name too long\n"
    assert list(tmp_path.iterdir()) == []
    # A target no file can be written at is a usage error (exit 2), as hop run's output that cannot be made: it
    # exited 1, as for a disk that filled up as it wrote.
    for argv in (["text", "/proc/hop-x/words.txt", "--size", "1KB"], ["pageviews", "/proc/hop-x", "--size", "10KB"]):
        args = _parser().parse_args(["gen", *argv])
        assert args.func(args) == 2, argv
        assert "error: cannot write /proc/hop-x" in capsys.readouterr().err, argv


def test_cli_pageviews(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options = ["--pages", "2000", "--size", "0.2MB", "--no-gzip", "--seed", "3"]
    args = _parser().parse_args(["gen", "pageviews", str(tmp_path), *options])
    assert args.func(args) == 0
    files = sorted(tmp_path.iterdir())
    assert len(files) == 24 and files[0].name == "pagecounts-20090101-000000"
    assert abs(sum(f.stat().st_size for f in files) - 200_000) < 10_000
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_refuses_a_folder_holding_files_of_an_earlier_run_it_would_not_rewrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--files 2`` into a folder of 3 rewrote two files and left the third: read as one input, the folder held two
    runs' text. So did pageviews with other ``--days``, ``--start`` or ``--no-gzip``. Refused now, before anything is
    written; a run rewriting every file there (or more) is not."""

    def gen(*argv: str) -> int:
        args = _parser().parse_args(["gen", *argv])
        return int(args.func(args))

    text = str(tmp_path / "text")
    assert gen("text", text, "--size", "3KB", "--files", "3") == 0
    before = {path.name: path.read_bytes() for path in (tmp_path / "text").iterdir()}
    assert gen("text", text, "--size", "2KB", "--files", "2", "--seed", "1") == 2
    assert f"{text} holds part-0002.txt of an earlier run, which this one would not rewrite" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in (tmp_path / "text").iterdir()} == before, "nothing written"
    assert gen("text", text, "--size", "4KB", "--files", "4", "--seed", "1") == 0
    views = str(tmp_path / "views")
    assert gen("pageviews", views, "--size", "5KB", "--pages", "2000") == 0
    for other in (["--no-gzip"], ["--start", "2009-01-02"]):
        assert gen("pageviews", views, "--size", "5KB", "--pages", "2000", *other) == 2
        assert "pagecounts-20090101-000000.gz, pagecounts-20090101-010000.gz" in capsys.readouterr().err
    assert gen("pageviews", views, "--size", "5KB", "--pages", "2000", "--days", "2", "--seed", "1") == 0
    assert len(list((tmp_path / "views").iterdir())) == 48


@pytest.mark.parametrize(
    "argv",
    [
        ["gen", "text", "x", "--size", "lots"],
        ["gen", "text", "x", "--size", "0"],
        ["gen", "text", "x"],
        ["gen", "pageviews", "x", "--size", "-1MB"],
        ["gen", "pageviews", "x", "--days", "0"],
        ["gen", "text", "", "--size", "1KB"],
        ["gen", "pageviews", ""],
    ],
)
def test_cli_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_cli_refuses_a_target_the_shell_left_unexpanded_or_named_minus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hop gen text '~/words.txt'`` (quoted: the shell expands no ~) wrote ``./~/words.txt``, a folder named ``~``
    whose ``rm -rf ~`` deletes the home directory; ``hop gen text -`` a file named ``-``."""
    monkeypatch.chdir(tmp_path)
    refused = {
        ("text", "~/words.txt", "--size", "1KB"): "~/words.txt starts with ~, which the shell expands only when not "
        "quoted and not after = (--output=~/out): write $HOME/words.txt, or ./~/words.txt for a directory named ~",
        ("pageviews", "~bob/views"): "write bob's home directory in place of ~bob, or ./~bob/views",
        ("text", "-", "--size", "1KB"): "- is no file: hop gen writes files, not standard output; give a name (./- for",
    }
    for argv, says in refused.items():
        with pytest.raises(SystemExit) as exit_info:
            _parser().parse_args(["gen", *argv])
        assert exit_info.value.code == 2
        assert says in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_cli_text_refuses_a_name_ending_in_a_slash_as_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hop gen text data/ --size 1KB`` wrote a file named ``data`` (and said it wrote ``data/``), where the slash
    named a directory to write into: refused as an existing directory is, saying what to give."""
    args = _parser().parse_args(["gen", "text", f"{tmp_path / 'data'}/", "--size", "1KB"])
    assert args.func(args) == 2
    assert capsys.readouterr().err == (
        f"hop gen text: error: {tmp_path / 'data'}/ ends with /, which names a directory: give the name of a file to "
        "write, or --files N to write N files into it\n"
    )
    assert os.listdir(tmp_path) == []


def test_cli_writes_through_a_link_and_refuses_a_pipe_or_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file is written under a temporary name and renamed over its target: ``hop gen text pipe`` replaced a named
    pipe by a file (as root, ``hop gen text /dev/null`` made /dev/null a file of text), and a symbolic link was
    replaced by a file, its target left as it was. A link is written through now; anything but a regular file is
    refused."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "real.txt").write_text("old\n")
    (tmp_path / "link.txt").symlink_to("real.txt")
    args = _parser().parse_args(["gen", "text", str(tmp_path / "pipe"), "--size", "1KB"])
    assert args.func(args) == 2
    assert capsys.readouterr().err == (
        f"hop gen text: error: {tmp_path / 'pipe'} is not a regular file (a device, pipe or socket): a file is "
        "written under a temporary name, then renamed over it; give the name of a file to write\n"
    )
    assert (tmp_path / "pipe").is_fifo()
    args = _parser().parse_args(["gen", "text", str(tmp_path / "link.txt"), "--size", "1KB"])
    assert args.func(args) == 0
    assert (tmp_path / "link.txt").is_symlink() and os.readlink(tmp_path / "link.txt") == "real.txt"
    assert len((tmp_path / "real.txt").read_bytes()) > 900
    assert sorted(os.listdir(tmp_path)) == ["link.txt", "pipe", "real.txt"]


def test_cli_reports_generator_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["gen", "pageviews", str(tmp_path), "--start", "yesterday"])
    assert args.func(args) == 2
    assert "YYYY-MM-DD" in capsys.readouterr().err


def test_ctrl_c_leaves_no_truncated_file(tmp_path: Path) -> None:
    """``hop gen text`` interrupted mid-file left a truncated file under its name, which a job would then read as
    if it were whole (and a truncated ``.gz`` of ``hop gen pageviews`` fails the job), after a KeyboardInterrupt
    traceback. Each file is written under a hidden ``.NAME.partial`` and renamed once complete."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "words.txt"
    command = subprocess.Popen(
        [sys.executable, "-m", "hop", "gen", "text", str(out), "--size", "5GB"], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not any(path.stat().st_size > 0 for path in tmp_path.iterdir()):  # writing, under whichever name
            assert time.monotonic() < deadline and command.poll() is None, "the generator started writing"
            time.sleep(0.01)
        command.send_signal(signal.SIGINT)
        _, stderr = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait(timeout=30)
    assert command.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr, stderr
    assert os.listdir(tmp_path) == [], "neither a truncated words.txt nor its partial file"


def test_a_full_disk_names_the_file_being_written(tmp_path: Path) -> None:
    """A write failing for want of room ("No space left on device", here a file size limit: EFBIG) said only
    "hop gen text: error: [Errno 28] No space left on device": it names the file given and what to do, and leaves
    no partial file."""
    import resource
    import signal
    import subprocess
    import sys

    def limited() -> None:  # (in the child: a write past 100 kB fails with EFBIG instead of killing it)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    out = tmp_path / "words.txt"
    command = [sys.executable, "-m", "hop", "gen", "text", str(out), "--size", "5MB"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, preexec_fn=limited)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"hop gen text: error: cannot write {out}: File too large; free space on its file system, or give a smaller "
        "--size\n"
    )
    assert list(tmp_path.iterdir()) == []


def _interrupted_gen(argv: list[str], written: Path, signum: int) -> subprocess.CompletedProcess[str]:
    """Run ``hop gen ARGV`` and send it ``signum`` once the file ``written`` is complete (so the run has written
    a file whole, and was writing the next); the finished command, its stderr captured."""
    command = subprocess.Popen([sys.executable, "-m", "hop", "gen", *argv], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not written.exists():
            assert time.monotonic() < deadline and command.poll() is None, "the generator wrote a file whole"
            time.sleep(0.01)
        command.send_signal(signum)
        _, stderr = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait(timeout=30)
    return subprocess.CompletedProcess(command.args, command.returncode, "", stderr)


@pytest.mark.parametrize(
    ("kind", "options", "first", "signum"),
    [
        ("text", ["--size", "5GB", "--files", "500"], "part-0000.txt", signal.SIGTERM),
        ("pageviews", ["--days", "300", "--pages", "20000", "--no-gzip"], "pagecounts-20090101-000000", signal.SIGINT),
    ],
)
def test_an_interrupted_gen_removes_the_files_and_folders_it_made(
    tmp_path: Path, kind: str, options: list[str], first: str, signum: int
) -> None:
    """``hop gen text out --files 5`` stopped half-way (Ctrl-C, SIGTERM) left ``out`` with the files written so far
    (an empty ``out`` when stopped in the first one): a later ``hop gen text out`` took it for a directory it would
    not write a file as, and ``--files 2`` into it was refused for an earlier run's leftovers. What the run made
    goes with it now, the folders it made too; nothing else was there."""
    out = tmp_path / "made" / "out"
    result = _interrupted_gen([kind, str(out), *options], out / first, signum)
    assert result.returncode == 128 + signum, result.stderr
    assert result.stderr == "hop: error: interrupted\n"
    assert os.listdir(tmp_path) == [], "neither the files written, nor out, nor the folder made for it"
    again = subprocess.run(
        [sys.executable, "-m", "hop", "gen", "text", str(out), "--size", "1KB"], capture_output=True, timeout=120
    )
    assert again.returncode == 0 and out.is_file(), again.stderr


def test_an_interrupted_gen_leaves_what_was_there_before_and_names_what_it_rewrote(tmp_path: Path) -> None:
    """Only what the run made goes: files that were there before stay, and one it rewrote is named, with what to do
    (the folder then holds files of two runs)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    (out / "part-0000.txt").write_text("an earlier run's\n")
    (out / "part-0002.txt").write_text("an earlier run's\n")
    argv = ["text", str(out), "--size", "5GB", "--files", "500"]
    result = _interrupted_gen(argv, out / "part-0001.txt", signal.SIGINT)
    assert result.returncode == 130, result.stderr
    assert sorted(os.listdir(out)) == ["notes.txt", "part-0000.txt", "part-0002.txt"]
    assert (out / "notes.txt").read_text() == "mine\n"
    assert (out / "part-0002.txt").read_text() == "an earlier run's\n", "not rewritten yet: as it was"
    assert result.stderr == (
        f"hop gen text: {out / 'part-0000.txt'}, there before, was rewritten before it stopped (the files it wrote new "
        "are removed, those it had yet to rewrite are as they were): run the command again to write them all\n"
        "hop: error: interrupted\n"
    )
