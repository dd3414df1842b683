"""Unmodified mrjob jobs on hop (``hop run --mrjob``), against mrjob's own inline runner on the same input.

mrjob's shipped examples and a few jobs written here for what the examples do not reach (protocols other than
JSON, hooks across steps, SORT_VALUES, file options, failures). Outputs compare as multisets of the (key, value)
pairs the job's OUTPUT_PROTOCOL reads back, with JSON lists and tuples alike.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import mrjob  # a dev dependency (pyproject's dev extra): these tests compare hop with it
import pytest
from mrjob.protocol import BytesProtocol, JSONValueProtocol
from mrjob.step import MRStep

from hop.client import Client
from hop.gen.text import generate_text
from hop.job import Job, Step
from hop.loader import JobFileError
from hop.mrjob_adapter import load_mrjob_file
from hop.mrjob_codec import Edge
from hop.spark_tasks import resolve_step
from hop.taskproc import skip_hint

EXAMPLES = Path(mrjob.__file__).parent / "examples"
TIMEOUT = 180
SPLIT_SIZE = "64KB"
"""``hop_run``'s split size: the smallest hop takes, so that the module's text (190 KB, :func:`text`) makes three
maps of hop's (several maps, hooks and combiners across them) while mrjob's runner, whose output each test compares
with, takes seconds less on it than on a larger text."""


def frozen(value: Any) -> Any:
    """A hashable form in which JSON lists and tuples compare equal, and values written differently do not: ``1``,
    ``1.0`` and ``True``, ``0.0`` and ``-0.0``, dicts with their items in another order (NaN equals itself here)."""
    if isinstance(value, list | tuple):
        return tuple(frozen(item) for item in value)
    if isinstance(value, dict):
        return ("dict", tuple((key, frozen(item)) for key, item in value.items()))
    if isinstance(value, set | frozenset):
        return frozenset(frozen(item) for item in value)
    if isinstance(value, bool | float):
        return (type(value).__name__, repr(value))
    return value


_MRJOB_OUTPUTS: dict[tuple[Any, ...], Counter[Any]] = {}
"""mrjob's outputs so far in this test process, by what they were computed from (:func:`mrjob_inline`)."""


def mrjob_inline(
    job_file: Path, inputs: list[Path], *job_args: str, cwd: Path | None = None, runner: str = "inline"
) -> Counter[Any]:
    """What mrjob itself outputs (its inline runner, or ``runner``), as a multiset of (key, value) pairs.

    Computed once per test process for the same job file (its path and text), inputs (their paths, sizes and
    modification times), arguments, directory and runner: several tests compare hop with the same reference (a
    shipped example on the module's text), which mrjob's runner takes seconds to produce."""
    key = (
        str(job_file), job_file.read_bytes(), tuple((str(path), _stamp(path)) for path in inputs), job_args,
        str(cwd), runner,
    )  # fmt: skip
    if key not in _MRJOB_OUTPUTS:
        _MRJOB_OUTPUTS[key] = _mrjob_output(job_file, inputs, *job_args, cwd=cwd, runner=runner)
    return Counter(_MRJOB_OUTPUTS[key])


def _stamp(path: Path) -> tuple[int, int] | None:
    """A file's size and modification time (ns); None for a directory (whose files are not looked at) or none."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return None if path.is_dir() else (stat.st_size, stat.st_mtime_ns)


def _mrjob_output(job_file: Path, inputs: list[Path], *job_args: str, cwd: Path | None, runner: str) -> Counter[Any]:
    job_class = load_mrjob_file(str(job_file))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd or job_file.parent)
        job = job_class(args=["-r", runner, "--no-conf", *job_args, *map(str, inputs)])
        with job.make_runner() as running:
            try:
                running.run()
                return Counter(frozen(pair) for pair in job.parse_output(running.cat_output()))
            finally:
                # mrjob's setup wrapper (the local runner's, for mapper_raw's manifest) locks a file in /tmp, named
                # whatever TMPDIR says, and never removes it.
                Path(f"/tmp/wrapper.lock.{running.get_job_key()}").unlink(missing_ok=True)


def hop_run(job_file: Path, inputs: list[Path], output: Path, *job_args: str, **options: Any) -> str:
    """Run the job with ``hop run --mrjob`` (or ``python -m hop.mrjob``), return its standard error;
    ``hop_options``: further options of ``hop run``."""
    command = [sys.executable, "-m", "hop.mrjob"] if options.get("module") else [sys.executable, "-m", "hop", "run"]
    command += [] if options.get("module") else ["--mrjob"]
    command += [str(job_file), *map(str, inputs), "-o", str(output), "--workers", "2", "--split-size", SPLIT_SIZE]
    command += ["--quiet", *options.get("hop_options", []), *(["--", *job_args] if job_args else [])]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, cwd=options.get("cwd"))
    assert result.returncode == 0, result.stderr
    return result.stderr


def hop_output(job_file: Path, output: Path, *job_args: str) -> Counter[Any]:
    """hop's output, read back as mrjob reads its own (``parse_output``: the job's OUTPUT_PROTOCOL)."""
    job = load_mrjob_file(str(job_file))(args=list(job_args))
    chunks = [part.read_bytes() for part in sorted(output.glob("part-*"))]
    return Counter(frozen(pair) for pair in job.parse_output(chunks))


def hop_fails(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "hop", "run", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd)
    assert result.returncode != 0, "the run should have failed"
    return result


def write_job(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("mrjob") / "text.txt"
    generate_text(source, 190_000, seed=51, vocabulary=3000)  # about 2,900 lines, 29,000 words: 3 maps of SPLIT_SIZE
    return source


@pytest.mark.parametrize(
    ("example", "job_args"),
    [
        ("mr_word_freq_count.py", []),
        ("mr_wc.py", []),  # mapper_final
        ("mr_most_used_word.py", []),  # FILES, mapper_init, two steps, JSONValueProtocol output
        ("mr_next_word_stats.py", []),  # SORT_VALUES, two steps
        ("mr_count_lines_right.py", []),  # mapper_init/mapper_final
        ("mr_log_sampler.py", ["--sample-size", "100000"]),  # ReprProtocol between steps, raw output, options
    ],
)
def test_mrjob_examples_match_mrjobs_inline_runner(
    example: str, job_args: list[str], text: Path, tmp_path: Path
) -> None:
    expected = mrjob_inline(EXAMPLES / example, [text], *job_args)
    assert expected, "mrjob produced output"
    hop_run(EXAMPLES / example, [text], tmp_path / "out", *job_args)
    assert hop_output(EXAMPLES / example, tmp_path / "out", *job_args) == expected
    assert [path.name for path in tmp_path.iterdir()] == ["out"], "the tasks' working directory was removed"


def test_mapper_raw_gets_each_file_whole_once_as_mrjobs_local_runner_gives_it(text: Path, tmp_path: Path) -> None:
    """``mapper_raw`` was refused. It is called once per input file, in a map task of its own (with its
    mapper_init/mapper_final), the file not split however large (the text is three of hop's maps at SPLIT_SIZE),
    with ``input_uri`` the file and ``input_path`` its content, a .gz file's decompressed, as ``mrjob -r local``
    gives them; an empty file gets its call too. What the call yields is spilled as it comes (a whole file's output
    need not fit in memory): with 1,000 records a spill, the text's 29,000 words make about 30 spills (its pairs
    reach the buffer 1,024 at a time), where one call's output made one spill a file."""
    with_gz = tmp_path / "lines.txt.gz"
    with_gz.write_bytes(gzip.compress(b"one two\nthree\n"))
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    job = write_job(
        tmp_path,
        "mr_raw.py",
        """
        import os

        from mrjob.job import MRJob


        class MRRaw(MRJob):
            def mapper_init(self):
                yield "tasks", 1

            def mapper_raw(self, input_path, input_uri):
                with open(input_path, "rb") as file:
                    content = file.read()
                yield "files", [os.path.basename(input_uri), os.path.isabs(input_uri), len(content)]
                for word in content.split():
                    yield word.decode("latin-1"), 1

            def mapper_final(self):
                yield "finals", 1

            def reducer(self, key, values):
                yield key, sorted(values) if key == "files" else sum(values)


        if __name__ == "__main__":
            MRRaw.run()
        """,
    )
    inputs = [text, with_gz, empty]
    expected = mrjob_inline(job, inputs, runner="local")
    assert ("tasks", 3) in expected and ("finals", 3) in expected, expected
    hop_run(job, inputs, tmp_path / "out", hop_options=["--spill-records", "1000"])
    assert hop_output(job, tmp_path / "out") == expected
    counters = json.loads((tmp_path / "out" / "_job.json").read_text())["counters"]
    assert counters["map_input_records"] == 3 and counters["spill_files"] > 20, counters


def test_a_mapper_raw_call_that_raises_says_how_to_skip_its_file(tmp_path: Path) -> None:
    """A ``mapper_raw`` call is a file's record: one that raises fails the job naming the file and saying that
    ``--skip-bad-records`` runs past it; with the option the file's output is left out (none of the call's pairs,
    not the ones it yielded before raising), it is listed in ``OUT/_bad_records``, and the other files count."""
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("a b a\n")
    bad.write_text("c BOOM c\n")
    job = write_job(
        tmp_path,
        "mr_raw_boom.py",
        """
        from mrjob.job import MRJob


        class MRRawBoom(MRJob):
            def mapper_raw(self, input_path, input_uri):
                with open(input_path) as file:
                    for word in file.read().split():
                        if word == "BOOM":
                            raise ValueError("cannot take BOOM")
                        yield word, 1

            def reducer(self, key, values):
                yield key, sum(values)


        if __name__ == "__main__":
            MRRawBoom.run()
        """,
    )
    failed = hop_fails("--mrjob", str(job), str(good), str(bad), "-o", str(tmp_path / "strict"), "--quiet")
    assert "cannot take BOOM" in failed.stderr and str(bad) in failed.stderr, failed.stderr
    assert skip_hint("records", str(tmp_path / "strict")) in failed.stderr, failed.stderr
    hop_run(job, [good, bad], tmp_path / "out", hop_options=["--skip-bad-records", "1"])
    assert hop_output(job, tmp_path / "out") == Counter({("a", 2): 1, ("b", 1): 1})
    listed = [
        json.loads(line)
        for f in (tmp_path / "out" / "_bad_records").glob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert len(listed) == 1 and str(bad) in json.dumps(listed[0]), listed


def test_a_map_retry_with_mapper_final_starts_over(text: Path, tmp_path: Path) -> None:
    """The first map attempt is killed mid-input, after spills that (without hooks) a retry would resume after: then
    the lines counted by the killed attempt would be missing from what mapper_final emits."""
    # The fault kills the first map after 4,096 records: the text's words two to a line (14,500 lines of about 13
    # bytes), so that a map of SPLIT_SIZE reads 4,900 of them; it spills 3 times (at 750, then every 3,000 words) first.
    words = text.read_text().split()
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("".join(" ".join(words[i : i + 2]) + "\n" for i in range(0, len(words), 2)))
    job = write_job(
        tmp_path,
        "mr_lines_and_words.py",
        """
        from mrjob.job import MRJob


        class MRLinesAndWords(MRJob):
            def mapper_init(self):
                self.lines = 0

            def mapper(self, _, line):
                self.lines += 1
                for word in line.split():
                    yield word, 1

            def mapper_final(self):
                yield "#lines", self.lines

            def reducer(self, key, counts):
                yield key, sum(counts)
        """,
    )
    command = [sys.executable, "-m", "hop", "run", "--mrjob", str(job), str(pairs), "-o", str(tmp_path / "out")]
    command += ["--workers", "2", "--split-size", SPLIT_SIZE, "--spill-records", "3000", "--quiet"]
    environment = {**os.environ, "HOP_FAULT": "map:running:0"}  # after 4,096 records
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=environment)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    map_attempts = [a for a in report["attempts"] if a["task_id"] == "map-00000"]
    assert [a["status"] for a in map_attempts] == ["failed", "succeeded"], "the fault killed the first attempt"
    assert len({a["task_id"] for a in report["attempts"] if a["task_id"].startswith("map-")}) == 3, "other maps too"
    assert report["counters"]["map_resumed_records"] == 0
    expected = mrjob_inline(job, [pairs])
    assert expected[("#lines", len(pairs.read_text().splitlines()))] == 1
    assert hop_output(job, tmp_path / "out") == expected


def test_output_is_written_in_mrjobs_format(text: Path, tmp_path: Path) -> None:
    job = EXAMPLES / "mr_word_freq_count.py"
    hop_run(job, [text], tmp_path / "out")
    lines = [line for part in sorted((tmp_path / "out").glob("part-*")) for line in part.read_text().splitlines()]
    counts = mrjob_inline(job, [text])
    assert sorted(lines) == sorted(f"{json.dumps(word)}\t{count}" for word, count in counts)


def test_input_file_of_the_mapper_as_jobconf(text: Path, tmp_path: Path) -> None:
    second = tmp_path / "second.txt"
    second.write_text("".join(text.read_text().splitlines(keepends=True)[:777]))
    job = EXAMPLES / "mr_count_lines_by_file.py"  # jobconf_from_env('mapreduce.map.input.file')
    expected = mrjob_inline(job, [text, second])
    hop_run(job, [text, second], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected
    assert expected[(f"file://{second}", 777)] == 1


def test_pickle_and_repr_protocols_hooks_across_steps_and_combiner_hooks(text: Path, tmp_path: Path) -> None:
    """Values JSON cannot carry (sets, tuple keys) under PickleProtocol; reducer_init/final output feeding the next
    step; mapper_init/final state; a combiner with hooks (skipped by hop, run by mrjob: same result)."""
    job = write_job(
        tmp_path,
        "mr_letter_sets.py",
        """
        from mrjob.job import MRJob
        from mrjob.protocol import PickleProtocol, ReprProtocol
        from mrjob.step import MRStep


        class MRLetterSets(MRJob):
            INTERNAL_PROTOCOL = PickleProtocol
            OUTPUT_PROTOCOL = ReprProtocol

            def steps(self):
                return [
                    MRStep(mapper_init=self.count_init, mapper=self.words, mapper_final=self.count_final,
                           combiner_init=self.combine_init, combiner=self.union, reducer_init=self.reduce_init,
                           reducer=self.by_letter, reducer_final=self.reduce_final),
                    MRStep(reducer=self.collect),
                ]

            def count_init(self):
                self.lines = 0

            def words(self, _, line):
                self.lines += 1
                for word in line.split():
                    yield (word[0], len(word) % 3), {word}

            def count_final(self):
                yield ("#", 0), self.lines

            def combine_init(self):
                self.combined = 0

            def union(self, key, values):
                values = list(values)
                yield key, sum(values) if key[0] == "#" else set().union(*values)

            def reduce_init(self):
                yield "#reducers", 1

            def by_letter(self, key, values):
                if key[0] == "#":
                    yield "#lines", sum(values)
                else:
                    yield key[0], (key[1], frozenset().union(*values))

            def reduce_final(self):
                yield "#final", 1

            def collect(self, letter, values):
                if letter.startswith("#"):
                    values = list(values)
                    yield letter, sum(values) if letter == "#lines" else min(values)
                else:
                    yield letter, tuple(sorted((n, tuple(sorted(words))) for n, words in values))
        """,
    )
    expected = mrjob_inline(job, [text])
    assert expected[("#lines", len(text.read_text().splitlines()))] == 1
    assert expected[("#final", 1)] == 1 and expected[("#reducers", 1)] == 1
    hop_run(job, [text], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected


def test_pickled_instances_of_classes_of_the_job_file(tmp_path: Path) -> None:
    """PickleProtocol keys and values that are instances of classes the job file defines (a namedtuple, a frozen
    dataclass): the tasks pickle them by their module's name, which was no module in a task process."""
    job = write_job(
        tmp_path,
        "mr_word_stats.py",
        """
        from collections import namedtuple
        from dataclasses import dataclass

        from mrjob.job import MRJob
        from mrjob.protocol import PickleProtocol
        from mrjob.step import MRStep

        Stat = namedtuple("Stat", "count letters")


        @dataclass(frozen=True)
        class Word:
            text: str


        class MRWordStats(MRJob):
            INTERNAL_PROTOCOL = PickleProtocol

            def steps(self):
                return [MRStep(mapper=self.words, combiner=self.add, reducer=self.add), MRStep(reducer=self.out)]

            def words(self, _, line):
                for word in line.split():
                    yield Word(word), Stat(1, len(word))

            def add(self, word, stats):
                stats = list(stats)
                yield word, Stat(sum(s.count for s in stats), sum(s.letters for s in stats))

            def out(self, word, stats):
                yield word.text, list(stats)
        """,
    )
    data = tmp_path / "in.txt"
    data.write_text("a bb a\nccc bb a\n")
    expected = mrjob_inline(job, [data])
    assert expected == Counter({("a", ((3, 3),)): 1, ("bb", ((2, 4),)): 1, ("ccc", ((1, 3),)): 1})
    hop_run(job, [data], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected


def test_json_values_and_sort_values_by_encoded_form(text: Path, tmp_path: Path) -> None:
    """Between steps JSON gives lists (not tuples) and string dict keys; SORT_VALUES sorts by the encoded value
    (so 10 sorts before 9); a JSON input protocol reads each line."""
    records = tmp_path / "records.jsonl"
    lines = text.read_text().splitlines()[:4000]
    records.write_text("".join(json.dumps({"words": line.split()}) + "\n" for line in lines if line.split()))
    job = write_job(
        tmp_path,
        "mr_json_shapes.py",
        """
        from mrjob.job import MRJob
        from mrjob.protocol import JSONValueProtocol


        class MRJsonShapes(MRJob):
            INPUT_PROTOCOL = JSONValueProtocol
            SORT_VALUES = True

            def mapper(self, _, record):
                words = record["words"]
                yield (words[0][0], len(words) % 4), {len(words[-1]): words[-1]}

            def reducer(self, key, values):
                # The key is a list and the dict keys are strings, as JSON gives them.
                yield key + ["tagged"], [length for value in values for length in value]
        """,
    )
    expected = mrjob_inline(job, [records])
    assert all(isinstance(length, str) for (_, lengths) in expected for length in lengths)
    numbers = [[int(length) for length in lengths] for (_, lengths) in expected]
    assert any(lengths != sorted(lengths) for lengths in numbers), "values sort by their encoded form, not by number"
    hop_run(job, [records], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected


def test_sort_values_sorts_a_combiners_values_too_as_mrjobs_local_runner(text: Path, tmp_path: Path) -> None:
    """With SORT_VALUES, Hadoop sorts a map's output by key and value before its combiner, so the combiner too gets
    each key's values in their encoded order (``mrjob -r local`` does the same); hop's combiner got them in the
    order the map yielded them, so a combiner keeping the first or last value kept another one."""
    job = write_job(
        tmp_path,
        "mr_sorted_combine.py",
        """
        import json

        from mrjob.job import MRJob

        class MRSortedCombine(MRJob):
            SORT_VALUES = True

            def mapper(self, _, line):
                for word in line.split():
                    yield len(word) % 3, word

            def combiner(self, key, words):
                words = list(words)
                yield key, "in order" if words == sorted(words, key=json.dumps) else "out of order"

            def reducer(self, key, orders):
                yield key, sorted(set(orders))

        if __name__ == "__main__":
            MRSortedCombine.run()
        """,
    )
    expected = mrjob_inline(job, [text], runner="local")
    assert expected == Counter({(key, ("in order",)): 1 for key in range(3)})
    hop_run(job, [text], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected


def test_file_option_relative_to_the_callers_directory(text: Path, tmp_path: Path) -> None:
    job = EXAMPLES / "mr_most_used_word.py"
    default = mrjob_inline(job, [text])
    most_used = next(iter(default))[1]
    (tmp_path / "stops.txt").write_text(f"{most_used}\n")
    expected = mrjob_inline(job, [text], "--stop-words-file", "stops.txt", cwd=tmp_path)
    assert expected != default, "the option changed the result"
    hop_run(job, [text], tmp_path / "out", "--stop-words-file", "stops.txt", cwd=tmp_path)
    assert hop_output(job, tmp_path / "out") == expected


def test_a_file_option_naming_no_file_is_refused_before_the_job_starts(tmp_path: Path) -> None:
    """A file option (``add_file_arg``) naming no file ran the job, which failed in the cluster where its
    ``mapper_init`` opened it; mrjob refuses to start without the file, and so does hop now, naming the option."""
    (tmp_path / "in.txt").write_text("a b\n")
    job = EXAMPLES / "mr_most_used_word.py"
    refused = hop_fails(
        "--mrjob", str(job), "in.txt", "-o", "out", "--", "--stop-words-file", "stops.txt", cwd=tmp_path
    )
    assert refused.returncode == 2, refused.stderr
    assert f"--stop-words-file stops.txt: no such file ({tmp_path / 'stops.txt'})" in refused.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"], "no output, no task working directory"


def test_passthrough_option_counters_status_and_module_entry_point(text: Path, tmp_path: Path) -> None:
    job = write_job(
        tmp_path,
        "mr_counting.py",
        """
        from mrjob.job import MRJob


        class MRCounting(MRJob):
            def configure_args(self):
                super().configure_args()
                self.add_passthru_arg("--min-length", type=int, default=1)

            def mapper(self, _, line):
                for word in line.split():
                    if len(word) >= self.options.min_length:
                        self.increment_counter("words", "long", 1)
                        yield len(word), 1
                self.set_status("mapping")

            def reducer(self, length, counts):
                yield length, sum(counts)
        """,
    )
    expected = mrjob_inline(job, [text], "--min-length", "6")
    stderr = hop_run(job, [text], tmp_path / "out", "--min-length", "6", module=True)
    assert hop_output(job, tmp_path / "out") == expected
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    long_words = sum(count for _, count in expected)
    assert json.dumps({"long": long_words}) in json.dumps(report), "increment_counter reaches hop's user counters"
    assert re.search(r"hop: MRCounting status \(task map \d+\): mapping\n", stderr), stderr


REDUCERS_JOB = """
from mrjob.job import MRJob
from mrjob.step import MRStep


class MRReducers(MRJob):
    JOBCONF = {"mapreduce.job.reduces": 3, "mapreduce.map.memory.mb": 2048}

    def steps(self):
        return [
            MRStep(mapper=self.words, combiner=self.total, reducer=self.total),
            MRStep(mapper=self.by_length, reducer=self.total, jobconf={"mapred.reduce.tasks": "1"}),
        ]

    def words(self, _, line):
        for word in line.split():
            yield word, 1

    def total(self, key, counts):
        yield key, sum(counts)

    def by_length(self, word, count):
        yield len(word), count
"""


def parts(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.glob("part-*"))


def test_jobconf_sets_each_steps_reducers_and_hop_reducers_wins(text: Path, tmp_path: Path) -> None:
    """JOBCONF's ``mapreduce.job.reduces`` and a step's ``mapred.reduce.tasks`` (the old name, later, so it wins)
    were ignored with a warning: every step ran one reducer per worker. They set each step's reducers now, in a
    pipeline and with --blocking; ``--reducers`` wins over both; a setting hop ignores is named."""
    job = write_job(tmp_path, "mr_reducers.py", REDUCERS_JOB)
    expected = mrjob_inline(job, [text])
    for name, hop_options, counts in (
        ("pipelined", [], (3, 1)),
        ("blocking", ["--blocking"], (3, 1)),
        ("given", ["--reducers", "2"], (2, 2)),
    ):
        out = tmp_path / name
        stderr = hop_run(job, [text], out, hop_options=[*hop_options, "--keep-intermediate"])
        assert hop_output(job, out) == expected
        assert (len(parts(out / "_steps" / "step-1")), len(parts(out))) == counts, name
        assert "jobconf hop does not follow (the job still reads it with jobconf_from_env): mapreduce.map." in stderr
        assert "mapreduce.job.reduces" not in stderr and "mapred.reduce.tasks" not in stderr


def test_the_jobconf_of_each_step_is_in_its_tasks_environment(tmp_path: Path) -> None:
    """A job reading its jobconf with ``jobconf_from_env`` (JOBCONF, ``--jobconf`` after --, a step's own) got None:
    hop warned that it ignored the settings and failed the job (``int(None)``). Each step's tasks see its settings
    now, as mrjob's local runners put them in their environment, and a later step's override is its own."""
    source = tmp_path / "in.txt"
    source.write_text("a bb cccc ddddd\ncccc zz\n")
    job = write_job(
        tmp_path,
        "mr_conf.py",
        """
        from mrjob.compat import jobconf_from_env
        from mrjob.job import MRJob
        from mrjob.step import MRStep


        class MRConf(MRJob):
            JOBCONF = {"my.min.length": 4, "my.tag": "job"}

            def steps(self):
                tagged = MRStep(reducer=self.tag, jobconf={"my.tag": "2"})
                return [MRStep(mapper=self.words, reducer=self.count), tagged]

            def words(self, _, line):
                for word in line.split():
                    if len(word) >= int(jobconf_from_env("my.min.length")):
                        yield word, jobconf_from_env("my.tag")

            def count(self, word, tags):
                yield word, [list(tags), jobconf_from_env("my.tag"), jobconf_from_env("my.given")]

            def tag(self, word, seen):
                yield word, [next(seen), jobconf_from_env("my.tag"), jobconf_from_env("my.given")]
        """,
    )
    expected = mrjob_inline(job, [source], "--jobconf", "my.given=x")
    assert expected[("cccc", ((("job", "job"), "job", "x"), "2", "x"))] == 1, expected
    hop_run(job, [source], tmp_path / "out", "--jobconf", "my.given=x")
    assert hop_output(job, tmp_path / "out", "--jobconf", "my.given=x") == expected


def test_each_task_finds_which_task_it_is_with_jobconf_from_env(tmp_path: Path) -> None:
    """``jobconf_from_env("mapreduce.task.partition")`` (or ``mapred.task.partition``, ``mapreduce.task.ismap``, the
    job, task and attempt ids), which mrjob's runners and Hadoop set for every task, was None on hop: a job making
    ids unique per task failed or made them collide. Each map and reduce attempt finds its own now, and in its
    environment under the Hadoop 1 names too, as mrjob's local runners set them."""
    inputs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for source in inputs:
        source.write_text("x\n")
    job = write_job(
        tmp_path,
        "mr_task.py",
        """
        import os

        from mrjob.compat import jobconf_from_env
        from mrjob.job import MRJob

        NAMES = ["mapreduce.task.partition", "mapred.task.partition", "mapreduce.task.ismap", "mapreduce.job.id",
                 "mapreduce.task.id", "mapreduce.task.attempt.id"]
        OLD_NAMES = ["mapred_task_partition", "mapred_task_is_map", "mapred_job_id", "mapred_tip_id", "mapred_task_id"]


        class MRTask(MRJob):
            JOBCONF = {"mapreduce.job.reduces": 2, "mapreduce.task.partition": "mine"}

            def mapper_init(self):
                yield "map", [jobconf_from_env(name) for name in NAMES] + [os.environ.get(n) for n in OLD_NAMES]

            def mapper(self, _, line):
                return ()

            def reducer_init(self):
                yield "reduce", [jobconf_from_env(name) for name in NAMES] + [os.environ.get(n) for n in OLD_NAMES]

            def reducer(self, kind, seen):
                for values in seen:
                    yield kind, values
        """,
    )
    hop_run(job, inputs, tmp_path / "out")
    rows = [json.loads(line.split("\t")[1]) for part in sorted((tmp_path / "out").glob("part-*")) for line in
            part.read_text().splitlines()]  # fmt: skip
    job_ids = {row[3] for row in rows}
    assert len(job_ids) == 1 and None not in job_ids, rows
    (job_id,) = job_ids
    seen = set()
    for partition, old_name, is_map, _, task_id, attempt_id, *in_environment in rows:
        assert in_environment == [partition, is_map, job_id, task_id, attempt_id], rows
        kind = "m" if is_map == "true" else "r"
        assert partition == old_name and task_id == f"task_{job_id}_{kind}_{int(partition):06d}", rows
        assert attempt_id == f"attempt_{job_id}_{kind}_{int(partition):06d}_0", rows
        seen.add((is_map, partition))
    assert seen == {("true", "0"), ("true", "1"), ("false", "0"), ("false", "1")}, rows


def test_a_later_steps_mapper_is_not_told_the_file_of_an_earlier_map(tmp_path: Path) -> None:
    """``jobconf_from_env("mapreduce.map.input.file")`` in a later step's mapper named the input file the first
    step's last map in the same task process had read (the variable was left set): a file it does not read. It
    names the step before's part file the map reads, pipelined or ``--blocking``, as mrjob names its own."""
    inputs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for source in inputs:
        source.write_text("x\n")
    job = write_job(
        tmp_path,
        "mr_later_file.py",
        """
        from mrjob.compat import jobconf_from_env
        from mrjob.job import MRJob
        from mrjob.step import MRStep


        class MRLaterFile(MRJob):
            def steps(self):
                return [MRStep(mapper=self.first, reducer=self.seen), MRStep(mapper=self.later, reducer=self.seen)]

            def first(self, _, line):
                yield "first", jobconf_from_env("mapreduce.map.input.file")

            def later(self, key, files):
                yield "later", jobconf_from_env("mapreduce.map.input.file")

            def seen(self, key, files):
                yield key, sorted(set(files), key=str)
        """,
    )
    for mode in ([], ["--blocking"]):
        out = tmp_path / f"out{len(mode)}"
        hop_run(job, inputs, out, hop_options=["--workers", "1", *mode])  # (one map process runs every map)
        (line,) = (out / "part-00000").read_text().splitlines()
        later = json.loads(line.partition("\t")[2])
        assert len(later) == 1 and later[0].startswith("file://") and later[0].endswith("/part-00000"), later


def numbered_lines(path: Path, size: int, seed: int) -> list[int]:
    """Write lines of about ``size`` bytes in all to ``path``, each starting with its own byte offset (8 digits)
    and of varying length; return the offsets."""
    offsets, lines, offset = [], [], 0
    for number in itertools.count():
        if offset >= size:
            break
        line = f"{offset:08d} {'x' * ((number * 7 + seed) % 53)}\n"
        offsets.append(offset)
        lines.append(line)
        offset += len(line)
    path.write_text("".join(lines))
    return offsets


RANGES_JOB = """
import os
import time

from mrjob.compat import jobconf_from_env
from mrjob.job import MRJob

NAMES = ["mapreduce.map.input.file", "mapreduce.map.input.start", "mapreduce.map.input.length",
         "map.input.start", "map.input.length"]


def said():
    # (the old names also as the variables themselves, as mrjob's local runners set them)
    return [jobconf_from_env("mapreduce.task.partition"), *map(jobconf_from_env, NAMES),
            os.environ.get("map_input_start"), os.environ.get("map_input_length")]


class MRRanges(MRJob):
    def mapper(self, _, line):
        if os.path.basename(jobconf_from_env("mapreduce.map.input.file")).startswith("slow"):
            time.sleep(0.003)
        yield said(), int(line[:8])

    def reducer(self, key, offsets):
        yield key, sorted(offsets)
"""


def ranges_read(output: Path) -> dict[tuple[str, ...], list[int]]:
    """The output of ``RANGES_JOB``: the offsets of the lines read, by (map, file URI, start, length) as the
    mapper's environment said while it read them (old names checked equal to the new ones)."""
    read: dict[tuple[str, ...], list[int]] = {}
    for part in sorted(output.glob("part-*")):
        for line in part.read_text().splitlines():
            key, offsets = map(json.loads, line.split("\t"))
            partition, uri, start, length, old_start, old_length, start_variable, length_variable = key
            assert old_start == start_variable == start and old_length == length_variable == length, key
            read[(partition, uri, start, length)] = offsets
    return read


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_each_map_finds_the_byte_range_it_reads_with_jobconf_from_env(order: str, tmp_path: Path) -> None:
    """``jobconf_from_env("mapreduce.map.input.start")`` and ``...length`` (and their old names ``map.input.*``),
    which mrjob's runners and Hadoop set to the split a mapper reads, were None on hop. They say the range being
    read, whichever of several a map reads (``--order random``: chunks of several files, one after another):
    every line is read under a range that holds it, and the ranges of each file cover it exactly, once; a
    compressed file is read whole, as ``0`` and its size."""
    offsets = {name: numbered_lines(tmp_path / name, size, seed) for name, size, seed in
               [("big.txt", 200_000, 1), ("a.txt", 3_000, 2), ("b.txt", 4_000, 3), ("c.txt", 5_000, 4)]}  # fmt: skip
    plain, zipped = tmp_path / "z.txt", tmp_path / "z.txt.gz"
    offsets[zipped.name] = numbered_lines(plain, 6_000, 5)
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    inputs = [tmp_path / name for name in offsets]
    job = write_job(tmp_path, "mr_ranges.py", RANGES_JOB)
    chunked = ["--order", "random", "--chunk-size", "64KB"] if order == "random" else []
    hop_run(job, inputs, tmp_path / "out", hop_options=chunked)
    read = ranges_read(tmp_path / "out")
    assert all(None not in key for key in read), read.keys()
    for source in inputs:
        ranges = sorted((int(start), int(length)) for _, uri, start, length in read if uri == f"file://{source}")
        seen = sorted(offset for (_, uri, _, _), lines in read.items() if uri == f"file://{source}" for offset in lines)
        assert seen == offsets[source.name], source  # every line once
        size = source.stat().st_size
        if source.suffix == ".gz":
            assert ranges == [(0, size)], ranges
            continue
        ends = [start + length for start, length in ranges]
        assert [start for start, _ in ranges] == [0, *ends[:-1]] and ends[-1] == size, (source, ranges)
    for (_, uri, start, length), lines in read.items():
        if not uri.endswith(".gz"):
            assert all(int(start) <= offset < int(start) + int(length) for offset in lines), (uri, start, length)
    assert len([key for key in read if key[1].endswith("big.txt")]) >= 3, read.keys()  # several splits
    ranges_per_map = Counter(partition for partition, *_ in read)
    # A map per split, as under mrjob; in random order, maps of several chunks.
    assert max(ranges_per_map.values()) == 1 if order == "sequential" else max(ranges_per_map.values()) >= 3


def test_a_tail_split_map_says_its_shortened_range_from_then_on(tmp_path: Path) -> None:
    """A straggling map is tail-split (``hop.scheduler``) while it runs: its range ends earlier, and the rest is a
    map of its own. The lines read after the split are said to be in the shortened range, the new map's in its
    own: the ranges the maps end with cover the file exactly, and every line was read under a range holding it."""
    fast = numbered_lines(tmp_path / "fast.txt", 60_000, 1)
    slow = numbered_lines(tmp_path / "slow.txt", 60_000, 2)  # 3 ms a line: about 3 s
    job = write_job(tmp_path, "mr_ranges.py", RANGES_JOB)
    hop_run(job, [tmp_path / "fast.txt", tmp_path / "slow.txt"], tmp_path / "out")
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["tail_splits"] >= 1, report
    read = ranges_read(tmp_path / "out")
    for name, offsets in (("fast.txt", fast), ("slow.txt", slow)):
        uri = f"file://{tmp_path / name}"
        mine = {key: lines for key, lines in read.items() if key[1] == uri}
        assert sorted(offset for lines in mine.values() for offset in lines) == offsets, name
        for (_, _, start, length), lines in mine.items():
            assert all(int(start) <= offset < int(start) + int(length) for offset in lines), (name, start, length)
        final: dict[tuple[str, str], int] = {}  # each map's range as it ended: the shortest it said
        for partition, _, start, length in mine:
            final[(partition, start)] = min(int(length), final.get((partition, start), int(length)))
        ranges = sorted((int(start), length) for (_, start), length in final.items())
        ends = [start + length for start, length in ranges]
        assert [start for start, _ in ranges] == [0, *ends[:-1]] and ends[-1] == (tmp_path / name).stat().st_size
    shortened = Counter((partition, uri, start) for partition, uri, start, _ in read)
    assert max(shortened.values()) >= 2, read.keys()  # a map said its range before and after it was split


def test_mapper_init_and_a_later_steps_map_find_the_range_they_read(tmp_path: Path) -> None:
    """``mapper_init`` finds the range its map reads first; a later step's map the part file it reads whole under
    ``--blocking``, and none pipelined, where it reads the partition as the step before writes it."""
    inputs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    inputs[0].write_text("x\ny\n")
    inputs[1].write_text("zz\n")
    job = write_job(
        tmp_path,
        "mr_init_ranges.py",
        """
        from mrjob.compat import jobconf_from_env
        from mrjob.job import MRJob
        from mrjob.step import MRStep

        NAMES = ["mapreduce.map.input.file", "mapreduce.map.input.start", "mapreduce.map.input.length"]


        class MRInitRanges(MRJob):
            def steps(self):
                return [MRStep(mapper_init=self.init, mapper=self.first, reducer=self.seen),
                        MRStep(mapper=self.later, reducer=self.merged)]

            def init(self):
                yield "init", [jobconf_from_env(name) for name in NAMES]

            def first(self, _, line):
                yield "first", [jobconf_from_env(name) for name in NAMES]

            def later(self, key, ranges):
                yield key, ranges
                yield "later", [[jobconf_from_env(name) for name in NAMES]]

            def seen(self, key, ranges):
                yield key, sorted({tuple(said) for said in ranges})

            def merged(self, key, lists):
                yield key, sorted({tuple(said) for ranges in lists for said in ranges})
        """,
    )
    for mode in ([], ["--blocking"]):
        out = tmp_path / f"out{len(mode)}"
        hop_run(job, inputs, out, hop_options=["--workers", "1", *mode])
        lines = (out / "part-00000").read_text().splitlines()
        said = {json.loads(key): json.loads(value) for key, value in (line.split("\t") for line in lines)}
        files = [[f"file://{source}", "0", str(source.stat().st_size)] for source in inputs]
        assert said["init"] == said["first"] == files, said
        ((part, start, length),) = said["later"]
        assert part.endswith("/part-00000"), said
        if mode:  # (--blocking: the part file, whole)
            assert start == "0" and int(length) > 0, said
        else:
            assert (start, length) == (None, None), said


def test_jobconf_reducers_sources_and_bad_settings(tmp_path: Path) -> None:
    """The command line's ``--jobconf`` (after --) overrides JOBCONF and a step's jobconf overrides both, under
    either name (None clears it); a number that is not one, two different numbers in one source, and 0 on a step
    with a reducer (map-only on Hadoop) are refused, naming the step and the setting."""
    from hop.mrjob_jobconf import step_jobconfs

    job_class = load_mrjob_file(str(write_job(tmp_path, "mr_reducers.py", REDUCERS_JOB)))

    def reducers(*args: str) -> list[int | None]:
        return [conf.reducers for conf in step_jobconfs(job_class(args=list(args)), "mr_reducers.py")]

    assert reducers() == [3, 1]
    assert reducers("--jobconf", "mapred.reduce.tasks=5") == [5, 1]
    cleared = [MRStep(mapper=str.split, jobconf={"mapreduce.job.reduces": None}), MRStep(reducer=max)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(job_class, "steps", lambda self: cleared)
        assert reducers() == [None, 3], "a step's None clears the job's setting, as under mrjob"
    for jobconf, message in (
        ({"mapreduce.job.reduces": "many"}, r"step 1: mapreduce.job.reduces=many: the number of reducers must be"),
        ({"mapreduce.job.reduces": 2, "mapred.reduce.tasks": 3}, r"step 1 sets .*=3 and .*=2: two numbers"),
        ({"mapreduce.job.reduces": 0}, r"MRReducers step 1: mapreduce.job.reduces=0 runs the step map-only on"),
    ):
        job_class.JOBCONF = jobconf
        with pytest.raises(JobFileError, match=message):
            reducers()


def test_jobconf_task_timeout_sources_and_bad_settings(tmp_path: Path) -> None:
    """``mapreduce.task.timeout`` (or ``mapred.task.timeout``) was named as a setting hop ignores: a job relying on
    it to kill a hung task waited for ever. It is each step's task timeout now, in milliseconds (0: none, as on
    Hadoop), from the same sources as the reducers; a value that is not a number of milliseconds is refused."""
    from hop.mrjob_jobconf import step_jobconfs

    job_class = load_mrjob_file(str(write_job(tmp_path, "mr_reducers.py", REDUCERS_JOB)))

    def timeouts(*args: str) -> list[float | None]:
        confs = step_jobconfs(job_class(args=list(args)), "mr_reducers.py")
        assert not any("task.timeout" in name for conf in confs for name in conf.ignored)
        return [conf.task_timeout for conf in confs]

    assert timeouts() == [None, None]
    assert timeouts("--jobconf", "mapreduce.task.timeout=1500") == [1.5, 1.5]
    assert timeouts("--jobconf", "mapred.task.timeout=0") == [None, None], "0: no timeout"
    job_class.JOBCONF = {**job_class.JOBCONF, "mapred.task.timeout": 60000}
    assert timeouts() == [60.0, 60.0]
    assert timeouts("--jobconf", "mapreduce.task.timeout=2000") == [2.0, 2.0], "--jobconf wins over JOBCONF"
    for jobconf, message in (
        ({"mapreduce.task.timeout": "10m"}, r"step 1: mapreduce.task.timeout=10m: the task timeout must be a whole"),
        ({"mapreduce.task.timeout": 1, "mapred.task.timeout": 2}, r"step 1 sets .* and .*: two task timeouts"),
    ):
        job_class.JOBCONF = jobconf
        with pytest.raises(JobFileError, match=message):
            timeouts()


def test_a_hung_mapper_is_killed_after_the_jobconfs_task_timeout_and_its_retry_succeeds(tmp_path: Path) -> None:
    """An mrjob job whose mapper hangs on its first attempt, with ``mapreduce.task.timeout`` set in its JOBCONF:
    the attempt is killed once it has not advanced for that long, and the retry gives the job's output."""
    source = tmp_path / "in.txt"
    source.write_text("a b\nc a\n")
    job = write_job(
        tmp_path,
        "mr_hangs_once.py",
        f"""
        import os
        import time

        from mrjob.job import MRJob


        class MRHangsOnce(MRJob):
            JOBCONF = {{"mapreduce.task.timeout": 1500}}

            def mapper(self, _, line):
                marker = {str(tmp_path / "hung")!r}
                if not os.path.exists(marker):
                    open(marker, "w").close()
                    time.sleep(600)
                for word in line.split():
                    yield word, 1

            def reducer(self, word, counts):
                yield word, sum(counts)


        if __name__ == "__main__":
            MRHangsOnce.run()
        """,
    )
    started = time.monotonic()
    hop_run(job, [source], tmp_path / "out")
    assert time.monotonic() - started < 60
    assert hop_output(job, tmp_path / "out") == Counter({("a", 2): 1, ("b", 1): 1, ("c", 1): 1})
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    failed = [a for a in report["attempts"] if a["status"] == "failed"]
    assert len(failed) == 1 and "(mapreduce.task.timeout=1500 (jobconf)), at " in failed[0]["error"], failed


def test_files_and_dirs_given_after_the_separator_and_other_runner_options(text: Path, tmp_path: Path) -> None:
    """mrjob's runner options after -- were ignored without a word: ``--files stops.txt`` left the tasks without
    the file (mapper_init failed), ``--cmdenv``/``--setup`` were dropped. ``--files`` and ``--dirs`` are in the
    tasks' working directory now, as mrjob's runners put them; options that say how mrjob runs (``-r local``,
    ``--no-conf``) are named in a warning; any other is refused, named."""
    job = write_job(
        tmp_path,
        "mr_stops.py",
        """
        from mrjob.job import MRJob

        class MRStops(MRJob):
            def mapper_init(self):
                self.stops = set()
                for name in ("stops.txt", "more/stops.txt"):
                    with open(name) as stops:
                        self.stops.update(stops.read().split())

            def mapper(self, _, line):
                for word in line.split():
                    if word not in self.stops:
                        yield word, 1

            def reducer(self, word, counts):
                yield word, sum(counts)

        if __name__ == "__main__":
            MRStops.run()
        """,
    )
    words = Counter(text.read_text().split()).most_common(2)
    (tmp_path / "lists" / "more").mkdir(parents=True)
    (tmp_path / "lists" / "stops.txt").write_text(words[0][0])
    (tmp_path / "lists" / "more" / "stops.txt").write_text(words[1][0])
    options = ["--files", "lists/stops.txt", "--dirs", "lists/more"]
    expected = mrjob_inline(job, [text], *options, cwd=tmp_path)
    assert len(expected) == len(set(text.read_text().split())) - 2
    given = ["-r", "local", "--no-conf", "--no-output"]  # (--no-output, which only says not to print it, was refused)
    stderr = hop_run(job, [text], tmp_path / "out", *options, *given, cwd=tmp_path)
    assert hop_output(job, tmp_path / "out") == expected
    ignored = "ignored on hop: --conf-path/--no-conf, --cat-output/--no-cat-output/--no-output, --runner"
    assert ignored in stderr, stderr
    out = str(tmp_path / "refused")
    refused = hop_fails("--mrjob", str(job), str(text), "-o", out, "--", "--cmdenv", "X=1", "--setup", "true")
    assert refused.returncode == 2 and "does not follow mrjob's runner option(s) --cmdenv, --setup" in refused.stderr


def test_a_reducer_reading_a_value_protocol_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With a value protocol between a mapper and a reducer, every key the reducer reads is None: mrjob calls it
    once per reducer task (neighbouring keys that decode equal are one group), hop once per distinct line. That
    difference was silent; it is named now, and a key/value protocol is not."""
    from hop.mrjob_adapter import MRJobRun

    source = """
        from mrjob.job import MRJob
        from mrjob.protocol import {protocol}

        class MRValues(MRJob):
            INTERNAL_PROTOCOL = {protocol}

            def mapper(self, _, line):
                yield line, len(line)

            def reducer(self, key, lengths):
                yield key, sum(lengths)
        """
    for protocol, named in (("ReprValueProtocol", True), ("ReprProtocol", False)):
        job = write_job(tmp_path, f"mr_{protocol}.py", source.format(protocol=protocol))
        MRJobRun(str(job), [], str(tmp_path / "out")).close()
        warning = f"MRValues step 1's reducer reads {protocol}, whose keys are all None: mrjob calls it once per"
        assert (warning in capsys.readouterr().err) is named, protocol


def test_a_failing_mapper_reports_the_users_traceback_and_record(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("fine\nstill fine\nboom here\nfine again\n")
    job = write_job(
        tmp_path,
        "mr_fails.py",
        """
        from mrjob.job import MRJob


        class MRFails(MRJob):
            def mapper(self, _, line):
                if "boom" in line:
                    raise ValueError("cannot map " + line)
                yield line, 1
        """,
    )
    result = hop_fails("--mrjob", str(job), str(source), "-o", str(tmp_path / "out"), "--workers", "1", "--quiet")
    assert result.returncode == 1
    assert "ValueError: cannot map boom here" in result.stderr
    assert f'File "{job}"' in result.stderr, "the traceback shows the user's code"
    assert "byte offset 16: 'boom here'" in result.stderr, "the failing record"


def test_a_failing_mappers_record_shows_the_bytes_that_are_not_utf8_as_its_bad_records_listing_does(
    tmp_path: Path,
) -> None:
    """An mrjob job's line that is not UTF-8 is kept with ``surrogateescape``: the error named it by its ``repr``,
    ``'caf\\udce9'``, where the listing of ``--skip-bad-records`` (and the README) show the byte, ``caf\\xe9``."""
    source = tmp_path / "in.txt"
    source.write_bytes(b"fine\nboom caf\xe9 \\udce9\n")
    job = write_job(
        tmp_path,
        "mr_fails.py",
        """
        from mrjob.job import MRJob


        class MRFails(MRJob):
            def mapper(self, _, line):
                if "boom" in line:
                    raise ValueError("cannot map it")
                yield line, 1
        """,
    )
    result = hop_fails("--mrjob", str(job), str(source), "-o", str(tmp_path / "out"), "--workers", "1", "--quiet")
    # (the text's own backslash stays a backslash, escaped by repr)
    assert "byte offset 5: 'boom caf\\xe9 \\\\udce9' raised ValueError" in result.stderr, result.stderr
    hop_run(job, [source], tmp_path / "skipped", hop_options=["--skip-bad-records", "1"])
    (listing,) = (tmp_path / "skipped" / "_bad_records").glob("*.jsonl")
    assert json.loads(listing.read_text(encoding="utf-8"))["record"] == "boom caf\\xe9 \\udce9"


def test_an_mrjob_mapper_or_reducer_that_yields_no_pair_is_shown_at_its_yield(tmp_path: Path) -> None:
    """An mrjob mapper yielding a bare number failed with "TypeError: 'int' object is not subscriptable" and the
    engine's frames (hop/tasks.py, shuffle/buffer.py, hop/mrjob_codec.py) as its traceback; a reducer yielding one
    with the NotPairsError alone. Both now say what to yield, and the traceback is the user's ``yield`` line. A
    mapper yielding a two-letter str, which mrjob unpacks as key and value, is refused the same way."""
    source = tmp_path / "in.txt"
    source.write_text("a b\nc\n")
    job = write_job(
        tmp_path,
        "mr_no_pairs.py",
        """
        from mrjob.job import MRJob


        class MRNoPairs(MRJob):
            def mapper(self, _, line):
                if self.options.bad_mapper:
                    yield len(line)
                elif self.options.code_mapper:
                    yield "en"
                else:
                    yield line, 1

            def reducer(self, line, counts):
                yield sum(counts)

            def configure_args(self):
                super().configure_args()
                self.add_passthru_arg("--bad-mapper", action="store_true")
                self.add_passthru_arg("--code-mapper", action="store_true")
        """,
    )
    cases = (("map", 8, ["--", "--bad-mapper"]), ("reduce", 15, []), ("map", 10, ["--", "--code-mapper"]))
    for where, line, job_args in cases:
        out = tmp_path / f"{where}-{line}"
        command = ["--mrjob", str(job), str(source), "-o", str(out), "--workers", "1", "--quiet"]
        result = hop_fails(*command, *job_args)
        assert result.returncode == 1 and f"the {where} gave something other than (key, value) pairs" in result.stderr
        shown = result.stderr.split("hop: error:")[0]
        assert shown.startswith(f'Traceback (most recent call last):\n  File "{job}", line {line}, in '), shown
        assert "hop/" not in shown and "shuffle/" not in shown, shown


def test_an_mrjob_job_whose_steps_or_init_raise_is_refused_with_its_traceback(tmp_path: Path) -> None:
    """An mrjob job whose steps() raised (a misspelt method in an MRStep) crashed hop run with its own traceback and
    exit code 1, and one whose __init__ raised was refused without the user's traceback: both are refused before
    the job starts (exit code 2), naming the call, with the user's traceback from the job's line, as a hop job's."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    job = write_job(
        tmp_path,
        "mr_broken.py",
        """
        from mrjob.job import MRJob
        from mrjob.step import MRStep


        class MRBroken(MRJob):
            def configure_args(self):
                super().configure_args()
                self.add_passthru_arg("--fail-init", action="store_true")

            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                if self.options.fail_init:
                    raise RuntimeError("no init")

            def steps(self):
                return [MRStep(mapper=self.mapper_misspelt)]
        """,
    )
    cases = ((["--", "--fail-init"], 14, "RuntimeError: no init"), ([], 17, "AttributeError: "))
    for number, (job_args, line, said) in enumerate(cases):
        command = ["--mrjob", str(job), str(source), "-o", str(tmp_path / f"out{number}"), "--quiet", *job_args]
        result = hop_fails(*command)
        assert result.returncode == 2, result.stderr
        shown, _, error = result.stderr.partition("hop: error: ")
        assert shown.startswith(f'Traceback (most recent call last):\n  File "{job}", line {line}, in '), shown
        assert "hop/" not in shown and said in shown, shown
        assert str(job) in error and said in error, error
        assert not (tmp_path / f"out{number}").exists()


def test_a_pair_its_protocol_cannot_write_names_the_protocol_and_the_pair(tmp_path: Path) -> None:
    """A mapper-only job yielding a set under OUTPUT_PROTOCOL = JSONProtocol failed with json's own "TypeError:
    Object of type set is not JSON serializable", naming neither the protocol nor the pair: both are named, with
    what to yield."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    job = write_job(
        tmp_path,
        "mr_set_value.py",
        """
        from mrjob.job import MRJob
        from mrjob.protocol import JSONProtocol


        class MRSetValue(MRJob):
            OUTPUT_PROTOCOL = JSONProtocol

            def mapper(self, _, line):  # (no reducer: the mapper's pairs are the output, written by the protocol)
                yield line, set(line.split())
        """,
    )
    result = hop_fails("--mrjob", str(job), str(source), "-o", str(tmp_path / "out"), "--workers", "1", "--quiet")
    assert result.returncode == 1, result.stderr
    error = result.stderr.partition("hop: error: ")[2]
    assert "map at " in error and "'a b'" in error, error
    assert "JSONProtocol cannot write the pair (key 'a b', value {" in error, error
    assert "Object of type set is not JSON serializable" in error and "yield keys and values" in error, error


def test_a_pair_its_protocol_cannot_write_is_shown_at_the_jobs_yield(tmp_path: Path) -> None:
    """A reducer yielding a pair its protocol cannot write showed only the engine's frames (hop/mrjob_codec.py,
    hop/tasks.py, shuffle/pairs.py) and json's, or, for OUTPUT_PROTOCOL = RawProtocol, mrjob's with neither the
    protocol nor the pair named; a mapper yielding a key JSON cannot write, the engine's frames and json's. The
    traceback is now the job's ``yield`` line, under the error naming the protocol and the pair."""
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    job = write_job(
        tmp_path,
        "mr_unwritable.py",
        """
        from mrjob.job import MRJob
        from mrjob.protocol import RawProtocol


        class MRUnwritable(MRJob):
            def configure_args(self):
                super().configure_args()
                self.add_passthru_arg("--case")

            def output_protocol(self):
                return RawProtocol() if self.options.case == "raw" else super().output_protocol()

            def mapper(self, _, line):
                yield {line} if self.options.case == "key" else line, 1

            def reducer(self, word, ones):
                yield word, sum(ones) if self.options.case == "raw" else set(ones)
        """,
    )
    cases = [
        ("set", "reducer", 18, "StandardJSONProtocol cannot write the pair (key 'a', value {1})"),
        ("raw", "reducer", 18, "TextProtocol cannot write the pair (key 'a', value 1)"),
        ("key", "mapper", 15, "StandardJSONProtocol cannot write the pair (key {'a'}, value 1)"),
    ]
    for case, function, line, written in cases:
        out = str(tmp_path / case)
        result = hop_fails(
            "--mrjob", str(job), str(source), "-o", out, "--workers", "1", "--quiet", "--", "--case", case
        )
        assert result.returncode == 1, result.stderr
        shown, _, error = result.stderr.partition("hop: error: ")
        assert written in error, result.stderr
        assert shown.startswith(f'Traceback (most recent call last):\n  File "{job}", line {line}, in {function}\n')
        assert "hop/" not in shown and "json/" not in shown and "mrjob/" not in shown, shown


def test_errors_name_a_key_as_the_job_yielded_it(tmp_path: Path) -> None:
    """A key travelling as its protocol's text was named by that text decoded as Latin-1: a ReprProtocol reducer
    failing at ``"ålice"`` said ``key "'Ã¥lice'"``, a PickleProtocol combiner its pickle's bytes escaped
    (``'\\x80\\x04...\\xc3\\xa5lice\\x94.'``), a JSON list key its text as bytes (``b'["\\u00e5lice"]'``). Errors
    now show the key the job yielded, read back by the protocol, or its text decoded as UTF-8."""
    source = tmp_path / "in.txt"
    source.write_text("ålice bob\nbob ålice\n", encoding="utf-8")
    job = write_job(
        tmp_path,
        "mr_bad_key.py",
        """
        from mrjob.job import MRJob
        from mrjob import protocol


        class MRBadKey(MRJob):
            def configure_args(self):
                super().configure_args()
                self.add_passthru_arg("--protocol", default="JSONProtocol")
                self.add_passthru_arg("--fail", choices=["reducer", "combiner", "combiner-key"], default="reducer")

            def internal_protocol(self):
                return getattr(protocol, self.options.protocol)()

            def mapper(self, _, line):
                for word in line.split():
                    yield [word] if self.options.protocol == "JSONProtocol" else word, "1"

            def combiner(self, word, ones):
                if "å" in str(word) and self.options.fail == "combiner":
                    raise ValueError("no")
                yield word + "x" if "å" in str(word) and self.options.fail == "combiner-key" else word, "".join(ones)

            def reducer(self, word, ones):
                if "å" in str(word):
                    raise ValueError("no")
                yield word, len("".join(ones))
        """,
    )
    cases = [
        ("JSONProtocol", "reducer", "reduce at key ['ålice'] raised ValueError: no"),
        ("ReprProtocol", "reducer", "reduce at key 'ålice' raised ValueError: no"),
        ("PickleProtocol", "combiner", "combine at key 'ålice' raised ValueError: no"),
        ("ReprProtocol", "combiner-key", "combine('ålice', ...) yielded key 'ålicex'; a combiner must keep the key"),
    ]
    for number, (internal, fail, said) in enumerate(cases):
        command = ["--mrjob", str(job), str(source), "-o", str(tmp_path / f"out{number}"), "--workers", "1"]
        result = hop_fails(*command, "--quiet", "--", "--protocol", internal, "--fail", fail)
        assert said in result.stderr, (internal, fail, result.stderr)


def test_a_key_that_is_not_utf8_is_named_by_its_bytes() -> None:
    """A key whose protocol text is not UTF-8 (BytesProtocol's) is shown as the bytes it is, not decoded wrong."""
    edge = Edge(BytesProtocol(), BytesProtocol(), native=False, shuffled=True)
    assert edge.show_key(b"caf\xe9".decode("latin-1")) == "b'caf\\xe9'"
    assert edge.show_key("na\xc3\xafve") == "'naïve'", "UTF-8 text as the text it is"
    values = Edge(JSONValueProtocol(), JSONValueProtocol(), native=False, shuffled=True)
    assert values.show_key('"\\u00e5"') == repr('"\\u00e5"'), "no _loads to read it: the text"


def test_modules_beside_an_mrjob_job_are_imported_and_travel(text: Path, tmp_path: Path) -> None:
    """An mrjob job importing a module beside it (``from wordlib.parse import words``), as ``python mr_job.py`` finds
    it, was refused before it started: "failed to import: ModuleNotFoundError: No module named 'wordlib'" (only hop
    jobs had the directory of their file on the path). It now runs, from another directory, with mrjob's output."""
    folder = tmp_path / "jobs"
    (folder / "wordlib").mkdir(parents=True)
    (folder / "wordlib" / "__init__.py").write_text("")
    write_job(folder / "wordlib", "parse.py", "def words(line):\n    return [w for w in line.split() if len(w) > 3]\n")
    job = write_job(
        folder,
        "mr_beside.py",
        """
        from mrjob.job import MRJob

        from wordlib.parse import words


        class MRBeside(MRJob):
            def mapper(self, _, line):
                for word in words(line):
                    yield word, 1

            def reducer(self, word, counts):
                yield word, sum(counts)
        """,
    )
    hop_run(job, [text], tmp_path / "out", cwd=tmp_path)
    assert hop_output(job, tmp_path / "out") == mrjob_inline(job, [text])


def test_unsupported_jobs_and_bad_arguments_are_clear_errors(text: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    grep = hop_fails("--mrjob", str(EXAMPLES / "mr_grep.py"), str(text), "-o", out, "--", "--expression", "ing")
    assert grep.returncode == 2 and "mapper_cmd" in grep.stderr and "write the step's mapper" in grep.stderr
    # A pre-filter was named, not the command, nor what to do instead.
    pre_filter = hop_fails("--mrjob", str(EXAMPLES / "mr_words_containing_u_freq_count.py"), str(text), "-o", out)
    assert pre_filter.returncode == 2, pre_filter.stderr
    assert "uses mapper_pre_filter (grep -i u): shell commands, which hop does not run" in pre_filter.stderr
    assert "filter the lines in the step's Python mapper (or combiner, reducer) instead" in pre_filter.stderr
    job = str(EXAMPLES / "mr_word_freq_count.py")
    bad = hop_fails("--mrjob", job, str(text), "-o", out, "--", "--no-such-option")
    assert bad.returncode == 2 and "bad job arguments" in bad.stderr and "--help" in bad.stderr
    inputs_after = hop_fails("--mrjob", job, "-o", out, str(text), "--", str(text))
    assert inputs_after.returncode == 2 and "give inputs before --" in inputs_after.stderr
    no_flag = hop_fails(job, str(text), "-o", out, "--", "--min-length", "3")
    assert no_flag.returncode == 2 and "add --mrjob" in no_flag.stderr
    hop_job = hop_fails("--mrjob", str(Path(__file__).parent.parent / "jobs" / "wordcount.py"), str(text), "-o", out)
    assert hop_job.returncode == 2 and "exactly one MRJob subclass" in hop_job.stderr
    # --input-format was taken: jsonl or csv gave the mapper dicts or lists, which failed it in hop's own code
    # ("'dict' object has no attribute 'isascii'", blamed on the input record), output failed every line.
    formatted = hop_fails("--mrjob", job, str(text), "-o", out, "--input-format", "jsonl")
    assert formatted.returncode == 2 and "an mrjob job reads lines through its INPUT_PROTOCOL" in formatted.stderr
    assert not (tmp_path / "out").exists()


def test_snapshots_of_an_mrjob_job_are_refused(tmp_path: Path) -> None:
    """``--snapshot-every`` ran an mrjob job's snapshots: their ``part-*`` held hop's own lines of its output's
    encoded text (``"\\"word\\"" TAB "23"``, its key quoted twice), not the lines its OUTPUT_PROTOCOL writes, and their
    estimates nothing. It is refused before the job starts, as ``--stop-when-accurate`` is."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    job = str(EXAMPLES / "mr_word_freq_count.py")
    for online in (["--snapshot-every", "0.5"], ["--stop-when-accurate", "0.1", "--order", "random"]):
        refused = hop_fails("--mrjob", job, str(source), "-o", str(tmp_path / "out"), *online)
        assert refused.returncode == 2, refused.stderr
        assert f"error: {online[0]}: snapshots are hop's online aggregation, for hop jobs" in refused.stderr
        assert "not its OUTPUT_PROTOCOL's" in refused.stderr
        assert not (tmp_path / "out").exists()


def test_a_job_whose_settings_methods_raise_is_refused_with_its_traceback(tmp_path: Path) -> None:
    """A job whose ``jobconf()`` (or ``files()``, ``partitioner()``... which a job may override) raised, or whose
    reducer is named ``files`` (it overrides mrjob's ``files()``, called without its arguments), crashed ``hop run``
    with hop's own traceback, exit code 1. It is refused (2) with the job's traceback, naming what raised."""
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    job = write_job(
        tmp_path,
        "mr_settings.py",
        """
        from mrjob.job import MRJob
        from mrjob.step import MRStep


        class MRSettings(MRJob):
            def configure_args(self):
                super().configure_args()
                self.add_passthru_arg("--bad-jobconf", action="store_true")

            def steps(self):
                return [MRStep(mapper=self.words, reducer=self.files)]

            def words(self, _, line):
                yield line, 1

            def files(self, word, ones):
                yield word, sum(ones)

            def jobconf(self):
                return {"mapreduce.job.reduces": self.options.reducers} if self.options.bad_jobconf else {}
        """,
    )
    clash = hop_fails("--mrjob", str(job), str(source), "-o", str(tmp_path / "out"))
    assert clash.returncode == 2, clash.stderr
    assert "MRSettings raised TypeError: MRSettings.files() missing 2 required positional arguments" in clash.stderr
    jobconf = hop_fails("--mrjob", str(job), str(source), "-o", str(tmp_path / "out"), "--", "--bad-jobconf")
    assert jobconf.returncode == 2, jobconf.stderr
    assert "MRSettings raised AttributeError: 'Namespace' object has no attribute 'reducers' as hop read its " in (
        jobconf.stderr
    )
    assert f'File "{job}", line 21, in jobconf' in jobconf.stderr, jobconf.stderr
    assert "hop/" not in jobconf.stderr.partition("hop: error:")[0], jobconf.stderr
    assert not (tmp_path / "out").exists()


def test_job_options_given_among_hops_name_where_they_go(tmp_path: Path) -> None:
    """``python mr_job.py --top 2 IN`` takes the job's options among the inputs; ``hop run --mrjob`` given them so
    said only ``unrecognized arguments: --top 2``."""
    mrjob_run = hop_fails("--mrjob", "mr_job.py", "in.txt", "-o", "out", "--top", "2", cwd=tmp_path)
    assert mrjob_run.returncode == 2
    assert "unrecognized arguments: --top 2 (an mrjob job's own options go after --" in mrjob_run.stderr
    assert "-o OUT -- --top 2 ...)" in mrjob_run.stderr
    hop_job = hop_fails("job.py", "in.txt", "-o", "out", "--top", "2", cwd=tmp_path)  # no word of mrjob
    assert hop_job.returncode == 2 and hop_job.stderr.rstrip().endswith("error: unrecognized arguments: --top 2")


def test_an_mrjob_job_deriving_from_a_base_job_in_its_file_is_the_one_loaded(tmp_path: Path) -> None:
    """As for a hop job: of MRJob classes deriving from one another, the one none derives from; two unrelated ones
    stay refused, unless the file's ``__main__`` runs one, which is then the one, as under mrjob."""
    base = "from mrjob.job import MRJob\n\n\nclass MRBase(MRJob):\n    pass\n\n\n"
    derived = write_job(tmp_path, "derived.py", base + "class MRWords(MRBase):\n    pass\n")
    assert load_mrjob_file(str(derived)).__name__ == "MRWords"
    two = "class MRA(MRBase):\n    pass\n\n\nclass MRB(MRBase):\n    pass\n"
    siblings = write_job(tmp_path, "siblings.py", base + two)
    with pytest.raises(JobFileError, match=r"\(found: MRBase, MRA, MRB\): run one in its if __name__ =="):
        load_mrjob_file(str(siblings))
    # The class the file's __main__ runs, as mrjob runs it with python FILE, even among unrelated ones or a base.
    main = "\n\nif __name__ == '__main__':\n    MRB.run()\n"
    assert load_mrjob_file(str(write_job(tmp_path, "main.py", base + two + main))).__name__ == "MRB"
    derived_main = base + "class MRWords(MRBase):\n    pass\n" + main.replace("MRB", "MRBase")
    base_main = write_job(tmp_path, "base_main.py", derived_main)
    assert load_mrjob_file(str(base_main)).__name__ == "MRBase"


def test_job_class_picks_the_mrjob_class_to_run(tmp_path: Path) -> None:
    """``--job-class`` with ``--mrjob`` was ignored: the class the file's ``__main__`` runs ran whatever it named
    (an unknown name too), and a file of unrelated classes without one stayed refused, exit 0 or 2 either way."""
    two = (
        "from mrjob.job import MRJob\n\n\nclass MRA(MRJob):\n    def mapper(self, _, line):\n        yield 'A', 1\n"
        "\n\nclass MRB(MRJob):\n    def mapper(self, _, line):\n        yield 'B', 1\n"
    )
    (tmp_path / "in.txt").write_text("x\ny\n")
    for name, main in [("main.py", "\n\nif __name__ == '__main__':\n    MRA.run()\n"), ("no_main.py", "")]:
        write_job(tmp_path, name, two + main)
        command = [sys.executable, "-m", "hop", "run", "--mrjob", name, "in.txt", "-o", f"out-{name}", "--quiet"]
        result = subprocess.run(
            [*command, "--workers", "1", "--job-class", "MRB"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert result.returncode == 0, result.stderr
        assert (tmp_path / f"out-{name}" / "part-00000").read_text() == '"B"\t1\n' * 2
    unknown = hop_fails("--mrjob", "main.py", "in.txt", "-o", "out", "--job-class", "MRC", cwd=tmp_path)
    assert unknown.returncode == 2, unknown.stderr
    assert "mrjob file main.py defines no MRJob subclass MRC (it defines: MRA, MRB)" in unknown.stderr


def test_a_job_file_running_an_imported_mrjob_class_runs_it(tmp_path: Path) -> None:
    """A job file whose ``__main__`` block runs a class it imports (``from mr_base import MRBase``), which
    ``python mr_job.py`` runs, was refused as defining no MRJob subclass; so was ``--job-class`` naming it."""
    write_job(
        tmp_path,
        "mr_base.py",
        """
        from mrjob.job import MRJob


        class MRBase(MRJob):
            def mapper(self, _, line):
                yield line[:1], 1

            def reducer(self, letter, ones):
                yield letter, sum(ones)


        class MROther(MRJob):
            def mapper(self, _, line):
                yield "other", 1
        """,
    )
    runner = write_job(
        tmp_path,
        "mr_runs_base.py",
        """
        from mr_base import MRBase, MROther

        if __name__ == "__main__":
            MRBase.run()
        """,
    )
    source = tmp_path / "in.txt"
    source.write_text("ab\nac\nb\n")
    expected = mrjob_inline(runner, [source])
    assert expected == Counter({("a", 2): 1, ("b", 1): 1}), expected
    hop_run(runner, [source], tmp_path / "out")
    assert hop_output(runner, tmp_path / "out") == expected
    hop_run(runner, [source], tmp_path / "other", hop_options=["--job-class", "MROther"])
    assert (tmp_path / "other" / "part-00000").read_text() + (tmp_path / "other" / "part-00001").read_text() == (
        '"other"\t1\n' * 3
    )


def _killed_once_submitted(client: Client, command: list[str], cwd: Path) -> str:
    """Run ``command`` (a ``hop submit`` writing to ``killed``) and SIGKILL it once its job runs; the job's id."""
    killed = subprocess.Popen(command, cwd=cwd)
    try:
        deadline = time.monotonic() + 60
        while not (running := [j for j in client.jobs() if j["state"] == "running" and j["output"].endswith("killed")]):
            assert time.monotonic() < deadline and killed.poll() is None, "the job was submitted"
            time.sleep(0.02)
    finally:
        killed.kill()
        killed.wait(timeout=10)
    return str(running[0]["job_id"])


def test_an_mrjob_output_is_marked_successful_only_once_rewritten(client: Client, tmp_path: Path) -> None:
    """The coordinator wrote ``_SUCCESS`` as the job ended, before the submitting ``hop`` rewrote the parts in the
    job's OUTPUT_PROTOCOL: a reader waiting for it could read hop's own encoding, and with that ``hop`` killed the
    output stayed so, marked successful (``"\\"a\\""  "1"`` for ``"a"  1``). The submitting ``hop`` marks it now."""
    job = write_job(
        tmp_path,
        "mr_slow.py",
        """
        import time
        from mrjob.job import MRJob

        class MRSlow(MRJob):
            def mapper(self, _, line):
                time.sleep(0.25)
                yield line, 1
        """,
    )
    (tmp_path / "in.txt").write_text("a\nb\nc\nd\ne\nf\n")
    submit = ["submit", "--mrjob", str(job), "in.txt", "--coordinator", client.address, "--quiet"]
    done = subprocess.run([sys.executable, "-m", "hop", *submit, "-o", "done"], cwd=tmp_path, timeout=TIMEOUT)
    assert done.returncode == 0 and (tmp_path / "done" / "_SUCCESS").exists()
    assert sorted(
        line for part in (tmp_path / "done").glob("part-*") for line in part.read_text().splitlines(True)
    ) == [f'"{word}"\t1\n' for word in "abcdef"]
    job_id = _killed_once_submitted(client, [sys.executable, "-m", "hop", *submit, "-o", "killed"], tmp_path)
    assert client.wait(job_id, timeout=60)["state"] == "succeeded"
    assert not (tmp_path / "killed" / "_SUCCESS").exists()


def test_a_killed_mrjob_run_leaves_its_task_files_to_the_next(client: Client, tmp_path: Path) -> None:
    """``hop submit --mrjob`` killed with -9 could not remove the tasks' working directory it made beside the output
    (``.hop-mrjob-files-*``, links to the job's FILES), and no later run did. The next mrjob run making one there
    removes it; one whose process still runs stays."""
    job = write_job(
        tmp_path,
        "mr_files.py",
        """
        import time
        from mrjob.job import MRJob

        class MRFiles(MRJob):
            FILES = ["stops.txt"]

            def mapper(self, _, line):
                time.sleep(0.2)
                with open("stops.txt") as stops:
                    if line not in stops.read().split():
                        yield line, 1
        """,
    )
    (tmp_path / "stops.txt").write_text("b\n")
    (tmp_path / "in.txt").write_text("a\nb\nc\n")
    submit = [sys.executable, "-m", "hop", "submit", "--mrjob", str(job), "in.txt", "--coordinator", client.address]
    job_id = _killed_once_submitted(client, [*submit, "--quiet", "-o", "killed"], tmp_path)
    assert client.wait(job_id, timeout=60)["state"] == "succeeded"  # (its files were there throughout)
    (abandoned,) = tmp_path.glob(".hop-mrjob-files-*")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from hop.mrjob_adapter import MRJobRun; "
         f"print(MRJobRun({str(job)!r}, [], 'held').workdir, flush=True); time.sleep(60)"],
        cwd=tmp_path, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() != "None"  # (made its directory)
        (held,) = set(tmp_path.glob(".hop-mrjob-files-*")) - {abandoned}
        done = subprocess.run([*submit, "--quiet", "-o", "done"], cwd=tmp_path, timeout=TIMEOUT)
        assert done.returncode == 0
        lines = sorted(line for part in (tmp_path / "done").glob("part-*") for line in part.read_text().splitlines())
        assert lines == ['"a"\t1', '"c"\t1']
        assert list(tmp_path.glob(".hop-mrjob-files-*")) == [held]
    finally:
        holder.kill()
        holder.communicate(timeout=10)


def test_hop_imports_without_mrjob_and_says_what_to_install(text: Path, tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['mrjob'] = None; import hop, hop.cli; "
        f"sys.exit(hop.cli.main(['run', '--mrjob', {str(EXAMPLES / 'mr_wc.py')!r}, {str(text)!r}, '-o', "
        f"{str(tmp_path / 'out')!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 2 and "needs the mrjob package" in result.stderr and "pip install" in result.stderr


class _HookedJob(Job):
    def steps(self) -> list[Step]:
        combine = lambda key, counts: [(key, sum(counts))]  # noqa: E731
        return [
            Step(
                mapper=lambda key, line: [(line, 1)],
                mapper_final=lambda: [("#", 1)],
                combiner=combine,
                combiner_final=lambda: [("c", 1)],
            )
        ]


def test_spark_engine_runs_step_hooks_but_not_a_combiner_with_hooks() -> None:
    """The Spark engine runs init/final hooks (tests/test_spark.py compares their output with hop's); like hop, it
    does not run a combiner that has hooks."""
    functions = resolve_step(_HookedJob(), 0)
    assert functions.step.mapper_final is not None and functions.combiner is None


def test_hop_does_not_run_a_combiner_with_hooks(tmp_path: Path) -> None:
    """A hop job (no mrjob): the combiner's extra pairs would show in the output if it ran."""
    source = tmp_path / "in.txt"
    source.write_text("a b a\nb c\n")
    job = write_job(
        tmp_path,
        "hooked.py",
        """
        import hop


        class Hooked(hop.Job):
            def steps(self):
                return [
                    hop.Step(
                        mapper=lambda offset, line: [(word, 1) for word in line.split()],
                        combiner=lambda word, counts: [(word, 1000 * sum(counts))],
                        combiner_final=lambda: [("combined", 1)],
                        reducer=lambda word, counts: [(word, sum(counts))],
                        reducer_final=lambda: [("reduced", 1)],
                    )
                ]
        """,
    )
    result = subprocess.run(
        [sys.executable, "-m", "hop", "run", str(job), str(source), "-o", str(tmp_path / "out"), "--workers", "1"]
        + ["--reducers", "1", "--quiet"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    lines = sorted((tmp_path / "out" / "part-00000").read_text().splitlines())
    assert lines == ['"a"\t2', '"b"\t2', '"c"\t1', '"reduced"\t1']


def test_each_file_gets_its_own_mapper_and_mapper_init_knows_it(text: Path, tmp_path: Path) -> None:
    """hop packed small files into one map, so a mapper_final reporting per file mixed them (one line for three
    files); jobconf_from_env named the input file only once mapper ran, not in mapper_init; and an empty file got no
    mapper, so its mapper_init and mapper_final did not run, where Hadoop and mrjob run them."""
    folder = tmp_path / "many"
    folder.mkdir()
    lines = text.read_text().splitlines(keepends=True)
    for name, (start, stop) in {"a.txt": (0, 100), "b.txt": (200, 351), "c.txt": (400, 430)}.items():
        (folder / name).write_text("".join(lines[start:stop]))
    (folder / "d.txt").write_text("")
    job = write_job(
        tmp_path,
        "mr_by_file.py",
        """
        import os
        from mrjob.compat import jobconf_from_env
        from mrjob.job import MRJob

        class MRByFile(MRJob):
            def mapper_init(self):
                self.lines = 0
                self.named = os.path.basename(jobconf_from_env("mapreduce.map.input.file") or "none")

            def mapper(self, _, line):
                self.lines += 1
                self.file = os.path.basename(jobconf_from_env("mapreduce.map.input.file"))

            def mapper_final(self):
                yield [self.named, getattr(self, "file", "-")], self.lines

            def reducer(self, names, counts):
                yield names, sum(counts)

        if __name__ == "__main__":
            MRByFile.run()
        """,
    )
    expected = mrjob_inline(job, [folder])
    assert expected == Counter(
        {
            (("a.txt", "a.txt"), 100): 1,
            (("b.txt", "b.txt"), 151): 1,
            (("c.txt", "c.txt"), 30): 1,
            (("d.txt", "-"), 0): 1,
        }
    )
    hop_run(job, [folder], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected


def test_list_keys_and_tuple_keys_passed_on_to_a_later_step(text: Path, tmp_path: Path) -> None:
    """A tuple key reaches the next step's mapper as a JSON list; a mapper passing it on (or yielding a list key
    itself) failed the job: a hop key must be hashable. List keys are tuples in the shuffle now."""
    job = write_job(
        tmp_path,
        "mr_pairs.py",
        """
        from mrjob.job import MRJob
        from mrjob.step import MRStep

        class MRPairs(MRJob):
            def steps(self):
                return [
                    MRStep(mapper=self.pairs, combiner=self.total, reducer=self.total),
                    MRStep(mapper=self.doubled, reducer=self.total),
                ]

            def pairs(self, _, line):
                words = line.split()
                for first, second in zip(words, words[1:]):
                    yield (first[:1], second[:1]), 1
                    yield [len(first), [first[:1]]], 1

            def total(self, key, counts):
                yield key, sum(counts)

            def doubled(self, key, count):
                yield key, 2 * count

        if __name__ == "__main__":
            MRPairs.run()
        """,
    )
    expected = mrjob_inline(job, [text])
    hop_run(job, [text], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected


def test_keys_group_by_their_encoded_text_as_hadoop_groups_mrjobs_lines(tmp_path: Path) -> None:
    """Keys equal in Python but written differently (``1``, ``true``; ``-0.0`` and ``0``; ``[1, "x"]`` and
    ``[true, "x"]``; a dict with its items in another order) were one key on hop, which groups by value; mrjob's
    lines group by their text. Dict keys failed the job (unhashable). Each text is its own key now, through a
    combiner, a reducer-only later step and a mapper-only one. (Keys here have others between them in the lines'
    order: mrjob's own reducer also joins neighbouring lines whose keys decode equal, see the README.)"""
    job = write_job(
        tmp_path,
        "mr_key_texts.py",
        """
        from mrjob.job import MRJob
        from mrjob.step import MRStep

        KEYS = [1, 2, True, "1", -0.0, -0.5, 0, [1, "x"], [2, "x"], [True, "x"], {"a": 1, "b": 2}, {"a": 2},
                {"b": 2, "a": 1}, None]

        class MRKeyTexts(MRJob):
            def steps(self):
                return [
                    MRStep(mapper=self.keys, combiner=self.total, reducer=self.total),
                    MRStep(reducer=self.total),
                    MRStep(mapper=self.tagged),
                    MRStep(reducer=self.total),
                ]

            def keys(self, _, line):
                for key in KEYS:
                    yield key, len(line)

            def total(self, key, counts):
                yield key, sum(counts)

            def tagged(self, key, count):
                yield [key, count > 0], count

        if __name__ == "__main__":
            MRKeyTexts.run()
        """,
    )
    source = tmp_path / "in.txt"
    source.write_text("a\nbb\nccc\n" * 3000)
    expected = mrjob_inline(job, [source])
    assert len(expected) == 14 and set(expected.values()) == {1}, expected
    assert frozen(([True, True], 18_000)) in expected and frozen(([1, True], 18_000)) in expected
    hop_run(job, [source], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected
    lines = b"".join(part.read_bytes() for part in (tmp_path / "out").glob("part-*")).splitlines()
    assert b'[{"b": 2, "a": 1}, true]\t18000' in lines and b"[-0.0, true]\t18000" in lines, lines


def test_a_reducer_gets_its_keys_in_the_order_of_their_encoded_text_as_under_hadoop(tmp_path: Path) -> None:
    """Hadoop sorts mrjob's lines by their bytes, so a reducer gets its keys (and writes its output) in the order of
    their encoded text, as each of mrjob's reducer tasks does: ``10`` before ``2``, ``"new york"`` before ``"new"``,
    ``"\\u00e9"`` between ``"Z"`` and ``"a"``. hop gave str and int keys in the order of their values (``2``
    before ``10``, every int before every str, ``"é"`` after ``"z"``), with one reducer too."""
    job = write_job(
        tmp_path,
        "mr_key_order.py",
        """
        from mrjob.job import MRJob
        from mrjob.step import MRStep

        KEYS = [2, 10, -1, "new", "new york", "Zulu", "\u00e9clair", "apple", 'say "hi"', [1, "b"], ["a", 2]]


        class MRKeyOrder(MRJob):
            JOBCONF = {"mapreduce.job.reduces": 1}

            def steps(self):
                return [MRStep(mapper=self.keys, combiner=self.total, reducer_init=self.start, reducer=self.seen,
                               reducer_final=self.order)]

            def keys(self, _, line):
                for key in KEYS:
                    yield key, 1

            def total(self, key, counts):
                yield key, sum(counts)

            def start(self):
                self.keys_seen = []

            def seen(self, key, counts):
                self.keys_seen.append(key)
                yield key, sum(counts)

            def order(self):
                yield "order", self.keys_seen
        """,
    )
    source = tmp_path / "in.txt"
    source.write_text("x\n" * 10)
    hop_run(job, [source], tmp_path / "out")
    lines = (tmp_path / "out" / "part-00000").read_bytes().splitlines()
    keys = [line.split(b"\t")[0] for line in lines[:-1]]
    assert keys == sorted(keys) and len(keys) == 11, lines
    assert keys[:3] == [b'"Zulu"', b'"\\u00e9clair"', b'"apple"'] and keys.index(b"10") < keys.index(b"2"), keys
    assert keys.index(b'"new york"') < keys.index(b'"new"'), keys
    order = json.loads(lines[-1].split(b"\t")[1])
    assert [json.dumps(key).encode() for key in order] == keys, "the reducer was called in that order"


def test_nan_keys_group_as_mrjob_groups_them(tmp_path: Path) -> None:
    """mrjob groups float NaN keys (their JSON text, ``NaN``, is one key); hop refused them (a NaN equals nothing,
    not even itself). They group now, alone or in a list key, from several maps, through a combiner that yields
    an equal key as a new object, and across a mapper-only step."""
    job = write_job(
        tmp_path,
        "mr_nan_keys.py",
        """
        import json

        from mrjob.job import MRJob
        from mrjob.step import MRStep

        class MRNanKeys(MRJob):
            def steps(self):
                return [
                    MRStep(mapper=self.numbers, combiner=self.total, reducer=self.total),
                    MRStep(mapper=self.pairs),
                    MRStep(reducer=self.total),
                ]

            def numbers(self, _, line):
                for word in line.split():
                    try:
                        yield float(word), 1  # a new NaN object for every "nan"
                    except ValueError:
                        yield word, 1

            def total(self, key, counts):
                yield json.loads(json.dumps(key)), sum(counts)

            def pairs(self, key, count):
                yield [key, count % 2], count

        if __name__ == "__main__":
            MRNanKeys.run()
        """,
    )
    source = tmp_path / "in.txt"
    source.write_text("nan 1.5 x NaN 2\n2 nan y\n" * 8_000)  # 3 maps of SPLIT_SIZE
    expected = mrjob_inline(job, [source])
    totals = {(math.nan, 0): 24_000, (1.5, 0): 8_000, ("x", 0): 8_000, (2.0, 0): 16_000, ("y", 0): 8_000}
    assert expected == Counter(frozen(pair) for pair in totals.items()), expected
    hop_run(job, [source], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected
    lines = b"".join(part.read_bytes() for part in (tmp_path / "out").glob("part-*")).splitlines()
    assert b"[NaN, 0]\t24000" in lines, lines


def test_lines_that_are_not_utf8_are_read_as_latin1_as_mrjob_reads_them(tmp_path: Path) -> None:
    """And without the carriage returns a line ends with: mrjob strips them all, hop's reader one (``plain
    line\\r\\r`` was a character longer)."""
    source = tmp_path / "latin.txt"
    source.write_bytes(b"caf\xe9 ol\xe9\nplain line\r\r\n\xff\xfe weird\n")
    job = EXAMPLES / "mr_wc.py"
    expected = mrjob_inline(job, [source])
    hop_run(job, [source], tmp_path / "out")
    assert (
        hop_output(job, tmp_path / "out") == expected == Counter({("chars", 29): 1, ("words", 6): 1, ("lines", 3): 1})
    )


def test_an_input_protocol_reading_bytes_gets_the_lines_bytes(tmp_path: Path) -> None:
    """A line that is not UTF-8 was read as Latin-1 and given to INPUT_PROTOCOL encoded as UTF-8: a bytes-reading
    protocol (BytesValueProtocol, RawProtocol, ...) got other bytes than the file's (``caf\\xc3\\xa9`` for
    ``caf\\xe9``). It gets the file's bytes now, and the default protocol still reads such a line as Latin-1. Without
    the carriage returns the line ends with, as mrjob strips them (``plain\\r\\r\\n`` gave ``plain\\r``)."""
    source = tmp_path / "latin.txt"
    source.write_bytes(b"caf\xe9 ol\xe9\nplain\r\r\nna\xc3\xafve\n")
    job = write_job(
        tmp_path,
        "mr_bytes.py",
        """
        from mrjob.job import MRJob
        from mrjob.protocol import BytesValueProtocol

        class MRBytes(MRJob):
            INPUT_PROTOCOL = BytesValueProtocol

            def mapper(self, _, line):
                yield line.hex(), len(line)

        if __name__ == "__main__":
            MRBytes.run()
        """,
    )
    expected = mrjob_inline(job, [source])
    assert expected[(b"caf\xe9 ol\xe9".hex(), 8)] == expected[(b"plain".hex(), 5)] == 1
    hop_run(job, [source], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected


def test_a_line_break_in_a_value_between_substeps_cuts_the_line_as_mrjob_reads_it(tmp_path: Path) -> None:
    """A protocol that writes its values raw (RawProtocol, TextProtocol...) writes a value's line break as it is:
    mrjob's next substep (and Hadoop's) reads two lines there, each without the ``\\r`` it ends with. hop carried
    the record whole (``('a', 'v\\nw')`` where mrjob reads ``('a', 'v')`` and ``('w', None)``, and kept
    ``x\\r``), so a job's output differed from mrjob's."""
    source = tmp_path / "in.txt"
    source.write_text("a w\nb\n")
    job = write_job(
        tmp_path,
        "mr_breaks.py",
        """
        from mrjob.job import MRJob
        from mrjob.protocol import RawProtocol
        from mrjob.step import MRStep

        class MRBreaks(MRJob):
            INTERNAL_PROTOCOL = RawProtocol

            def steps(self):
                return [MRStep(mapper=self.split, reducer=self.pass_on), MRStep(mapper=self.show, reducer=self.gather)]

            def split(self, _, line):
                words = line.split()
                yield words[0], "v\\n" + words[-1]
                yield words[0], "x\\r"
                yield "mid\\rkey", "y\\r\\n"

            def pass_on(self, key, values):
                for value in values:
                    yield key, value

            def show(self, key, value):
                yield "seen", repr((key, value))

            def gather(self, key, values):
                yield key, sorted(values)

        if __name__ == "__main__":
            MRBreaks.run()
        """,
    )
    expected = mrjob_inline(job, [source])
    seen = next(values for key, values in expected if key == "seen")
    assert "('a', 'v')" in seen and "('w', None)" in seen and "('a', 'x')" in seen, seen
    assert "('mid\\rkey', 'y')" in seen and "('', None)" in seen, seen
    hop_run(job, [source], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected


def test_a_python_without_the_modules_mrjob_imports_is_told_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """mrjob 0.7.4 imports distutils and pipes, gone from Python 3.12 and 3.13: there, a user with mrjob installed
    was told to install mrjob. Simulated here by hiding pipes (a None in sys.modules makes its import fail) from a
    fresh import of mrjob."""
    from hop.mrjob_loader import MRJobNotAvailable

    for name in [name for name in sys.modules if name == "mrjob" or name.startswith("mrjob.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pipes", None)
    job = tmp_path / "mr_job.py"
    job.write_text("from mrjob.job import MRJob\n\n\nclass MRNothing(MRJob):\n    pass\n")
    with pytest.raises(MRJobNotAvailable, match=r"mrjob imports pipes, .*: pip install standard-pipes"):
        load_mrjob_file(str(job))


def test_an_unsupported_step_is_named_by_its_number_from_one(tmp_path: Path) -> None:
    """A step hop cannot run is named as hop run names steps, from 1: the second step of a job (a ``mapper_raw``
    one) was "step 1"."""
    from tests.conftest import hop

    (tmp_path / "raw.py").write_text(
        "from mrjob.job import MRJob\nfrom mrjob.step import MRStep\n\n\nclass Raw(MRJob):\n"
        "    def mapper(self, _, line):\n        yield line, 1\n\n"
        "    def raw(self, path, uri):\n        yield path, 1\n\n"
        "    def steps(self):\n        return [MRStep(mapper=self.mapper), MRStep(mapper_raw=self.raw)]\n\n\n"
        "if __name__ == '__main__':\n    Raw.run()\n"
    )
    (tmp_path / "in.txt").write_text("a\n")
    result = hop("run", "--mrjob", "raw.py", "in.txt", "-o", "out", "--quiet", cwd=tmp_path)
    assert result.returncode == 2 and "Raw step 2 uses mapper_raw" in result.stderr, result.stderr


def test_job_help_after_the_separator_is_help_not_an_error(tmp_path: Path) -> None:
    """``hop run --mrjob JOB IN -o OUT -- --help`` printed the job's options (mrjob's parser does, then exits 0), then
    failed with "bad job arguments ['--help']" and exit code 2."""
    from tests.conftest import hop

    (tmp_path / "opts.py").write_text(
        "from mrjob.job import MRJob\n\n\nclass Opts(MRJob):\n"
        "    def configure_args(self):\n        super().configure_args()\n"
        "        self.add_passthru_arg('--top', type=int, default=1, help='how many words to keep')\n\n"
        "    def mapper(self, _, line):\n        yield line, 1\n"
    )
    (tmp_path / "in.txt").write_text("a\n")
    result = hop("run", "--mrjob", "opts.py", "in.txt", "-o", "out", "--", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "how many words to keep" in result.stdout and "bad job arguments" not in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_load_args_in_a_task_finds_it_is_a_task_and_its_file_options_as_under_mrjob(tmp_path: Path) -> None:
    """mrjob's ``is_task()`` is "mostly useful inside load_args" (its docstring): a job loads what only its tasks need
    there, reading its file options (``add_file_arg``). On hop it was False in every task, so such a job skipped it
    and wrote words it was told to leave out, without an error. A task's job is now made as mrjob makes it:
    ``load_args`` (and ``__init__``) see ``is_task()`` True, its step (``--step-num``) and kind, and its file options
    as paths it can open from the task's directory."""
    (tmp_path / "in.txt").write_text("the cat\nthe dog and the cat\n")
    (tmp_path / "stops.txt").write_text("the\nand\n")
    job = write_job(
        tmp_path,
        "mr_is_task.py",
        """
        from mrjob.job import MRJob


        class MRIsTask(MRJob):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.made = "in a task" if self.is_task() else "to launch"

            def configure_args(self):
                super().configure_args()
                self.add_file_arg("--stop-words-file")

            def load_args(self, args):
                super().load_args(args)
                self.stop_words = set()
                self.kind = "mapper" if self.options.run_mapper else "reducer" if self.options.run_reducer else None
                if self.is_task() and self.options.stop_words_file:
                    with open(self.options.stop_words_file) as words:
                        self.stop_words = set(words.read().split())

            def mapper(self, _, line):
                for word in line.split():
                    if word not in self.stop_words:
                        yield word, [self.kind, self.options.step_num]

            def reducer(self, word, seen):
                yield word, [len(list(seen)), self.kind, self.options.step_num, self.made]
        """,
    )
    args = ("--stop-words-file", "stops.txt")
    expected = mrjob_inline(job, [tmp_path / "in.txt"], *args, cwd=tmp_path)
    assert expected == Counter({("cat", (2, "reducer", 0, "in a task")): 1, ("dog", (1, "reducer", 0, "in a task")): 1})
    hop_run(job, [tmp_path / "in.txt"], tmp_path / "out", *args, cwd=tmp_path)
    assert hop_output(job, tmp_path / "out", *args) == expected


def test_a_tasks_load_args_that_raises_is_named_with_the_jobs_traceback(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("a b\n")
    job = write_job(
        tmp_path,
        "mr_load_model.py",
        """
        from mrjob.job import MRJob


        class MRLoadModel(MRJob):
            def load_args(self, args):
                super().load_args(args)
                if self.is_task():
                    self.model = open("model.bin").read()

            def mapper(self, _, line):
                yield line, len(self.model)
        """,
    )
    failed = hop_fails("--mrjob", str(job), "in.txt", "-o", "out", cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    assert "job failed: MRLoadModel() raised FileNotFoundError" in failed.stderr, failed.stderr
    assert 'mr_load_model.py", line 9, in load_args' in failed.stderr, failed.stderr


def test_a_job_file_named_without_py_runs_as_python_runs_it(tmp_path: Path) -> None:
    """``python mr_count`` runs a job file named without ``.py`` (an executable script); hop refused it as "not a
    Python module"."""
    (tmp_path / "in.txt").write_text("b a\nb\n")
    job = tmp_path / "mr_count"
    job.write_text((EXAMPLES / "mr_word_freq_count.py").read_text())
    hop_run(job, [tmp_path / "in.txt"], tmp_path / "out")
    lines = sorted(line for part in (tmp_path / "out").glob("part-*") for line in part.read_text().splitlines())
    assert lines == ['"a"\t1', '"b"\t2']


def test_a_job_given_no_input_reads_standard_input_as_mrjob_does(tmp_path: Path) -> None:
    """``python mr_job.py < IN`` reads standard input, given no input; ``hop run --mrjob mr_job.py -o OUT < IN``
    failed with hop's usage error (inputs required). It reads standard input now; a hop job still needs inputs."""
    (tmp_path / "in.txt").write_text("b a\nb\n")
    job = EXAMPLES / "mr_word_freq_count.py"
    expected = mrjob_inline(job, [tmp_path / "in.txt"])
    for command in (["--mrjob", str(job), "-o", "out", "--quiet"], ["--quiet", "--mrjob", "-o", "out", str(job)]):
        with open(tmp_path / "in.txt", "rb") as stdin:
            result = subprocess.run(
                [sys.executable, "-m", "hop", "run", *command], stdin=stdin, capture_output=True, text=True,
                timeout=TIMEOUT, cwd=tmp_path,
            )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert hop_output(job, tmp_path / "out") == expected
        assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "out"], "standard input's copy removed"
        shutil.rmtree(tmp_path / "out")
    refused = hop_fails(str(tmp_path / "job.py"), "-o", "out", cwd=tmp_path)
    assert "the following arguments are required: inputs" in refused.stderr, refused.stderr


def test_hadoop_streaming_reporter_lines_the_job_writes_count_as_under_mrjob(tmp_path: Path) -> None:
    """A job written for Hadoop streaming counts by writing ``reporter:counter:GROUP,COUNTER,AMOUNT`` to standard
    error itself, and sets its status with ``reporter:status:``; mrjob's runners parse them from its tasks' standard
    error, as Hadoop does. On hop they were printed as they were and counted nowhere."""
    (tmp_path / "in.txt").write_text("a b\nc\n\nd e f\n")
    job = write_job(
        tmp_path,
        "mr_streaming_counters.py",
        """
        import sys

        from mrjob.job import MRJob


        class MRStreamingCounters(MRJob):
            def mapper(self, _, line):
                sys.stderr.write("reporter:counter:Legacy,words,%d\\n" % len(line.split()))
                sys.stderr.write("reporter:status:")
                sys.stderr.write("at %r\\r\\n" % line)
                print("a line of the job's own", file=sys.stderr)
                yield "lines", 1

            def reducer(self, key, ones):
                sys.stderr.write("reporter:counter:Legacy,keys,1\\n")
                yield key, sum(ones)


        if __name__ == "__main__":  # (mrjob's local runner runs the file in its tasks)
            MRStreamingCounters.run()
        """,
    )
    expected = mrjob_inline(job, [tmp_path / "in.txt"], runner="local")  # (inline's sys.stderr takes bytes)
    stderr = hop_run(job, [tmp_path / "in.txt"], tmp_path / "out")
    assert hop_output(job, tmp_path / "out") == expected == Counter({("lines", 4): 1})
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["counters"]["user"] == {"Legacy": {"words": 6, "keys": 1}}, report["counters"]["user"]
    assert "reporter:" not in stderr, stderr
    assert stderr.count("a line of the job's own") == 4, stderr
    assert "MRStreamingCounters status (task map 0): at 'd e f'" in stderr, stderr


def test_reporter_lines_of_a_later_attempt_are_not_taken_by_a_failed_ones_counters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A task process runs attempts one after another, of any job. An mrjob attempt that failed gets no teardown, so
    its reporter-line routing stayed set: a later attempt's ``reporter:counter:`` line (a hop job writing one, which
    is its own text) went to the failed attempt's counters and was never printed."""
    import sys

    from hop import mrjob_reporter, task_status

    failed: list[tuple[str, str, int]] = []
    real_stderr = sys.stderr
    try:
        with task_status.reporting(lambda message: None):  # the mrjob attempt, which fails: no report_to(None, None)
            mrjob_reporter.report_to(lambda *counted: failed.append(counted), lambda message: None)
            sys.stderr.write("reporter:counter:Old,n,1\n")
        with task_status.reporting(lambda message: None):  # the next attempt in the same process
            sys.stderr.write("reporter:counter:Later,n,2\n")
            sys.stderr.flush()
    finally:
        mrjob_reporter.report_to(None, None)
        sys.stderr = real_stderr
    assert failed == [("Old", "n", 1)]
    assert "reporter:counter:Later,n,2\n" in capsys.readouterr().err
