"""End-to-end tests on a real local cluster: outputs equal a plain-Python computation of the same job."""

from __future__ import annotations

import bz2
import collections
import gzip
import json
import lzma
import random
import time
from pathlib import Path

import pytest

from hop.client import Client
from hop.gen.text import generate_text
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import JobFailed, build_spec, run_steps
from tests.conftest import job_path, output_dict, read_output, run_job, write_nan_keys_job


def word_counts(*paths: Path) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    for path in paths:
        opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(path.suffix, open)
        with opener(path, "rt", encoding="utf-8") as file:
            for line in file:
                counts.update(line.split())
    return dict(counts)


@pytest.fixture(scope="module")
def zipf_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("zipf") / "zipf.txt"
    generate_text(path, 3_000_000, seed=7, vocabulary=20_000)
    return path


def assert_sorted_parts(output: Path) -> None:
    from shuffle.keys import total_order_key

    for part in sorted(output.glob("part-*")):
        keys = [json.loads(line.split("\t")[0]) for line in part.read_text(encoding="utf-8").splitlines()]
        assert keys == sorted(keys, key=total_order_key), f"{part.name} is not sorted by key"


@pytest.mark.parametrize("reducers", [1, 2, 4])
def test_wordcount_zipf_exact(client: Client, zipf_text: Path, tmp_path: Path, reducers: int) -> None:
    output = tmp_path / "out"
    report = run_job(
        client, "wordcount", [zipf_text], output, num_reduces=reducers, split_size=1 << 20, spill_records=100_000
    )
    assert output_dict(output) == word_counts(zipf_text)
    assert sorted(p.name for p in output.glob("part-*")) == [f"part-{i:05d}" for i in range(reducers)]
    assert (output / "_SUCCESS").exists()
    assert not (output / "_temporary").exists()
    assert_sorted_parts(output)
    counters = report["counters"]
    assert counters["map_input_records"] == len(zipf_text.read_text(encoding="utf-8").splitlines())
    assert counters["map_output_records"] == sum(word_counts(zipf_text).values())
    assert counters["combine_input_records"] == counters["map_output_records"]
    assert counters["combine_output_records"] == counters["reduce_input_records"]
    assert counters["reduce_output_records"] == len(word_counts(zipf_text))
    assert counters["spills_pushed"] == counters["spill_files"] * reducers
    assert report["num_maps"] == 3


def test_job_report(client: Client, zipf_text: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    run_job(client, "wordcount", [zipf_text], output, num_reduces=2, split_size=1 << 20)
    report = json.loads((output / "_job.json").read_text())
    assert report["status"] == "succeeded"
    assert report["mode"] == "pipelined"
    assert report["start"] <= report["first_shuffle_at"] <= report["end"]
    # The shuffle's end: each reduce attempt's input was complete after the last map committed, before it ended.
    reduce_inputs = [a["input_complete"] for a in report["attempts"] if a["kind"] == "reduce"]
    assert len(reduce_inputs) == 2
    assert report["last_map_commit_at"] <= min(reduce_inputs)
    assert report["last_reduce_input_at"] == max(reduce_inputs) <= report["end"]
    for name in (
        "map_input_records",
        "map_output_records",
        "combine_input_records",
        "combine_output_records",
        "spill_files",
        "spills_pushed",
        "shuffle_bytes",
        "reduce_input_records",
        "reduce_output_records",
    ):
        assert report["counters"][name] > 0, name
    attempts = report["attempts"]
    assert {a["kind"] for a in attempts} == {"map", "reduce"}
    for attempt in attempts:
        assert set(attempt) >= {"task_id", "attempt", "kind", "worker", "pid", "start", "end", "status"}
        assert attempt["status"] == "succeeded"
        assert attempt["start"] <= attempt["end"]
    assert len({a["worker"] for a in attempts}) == 2, "tasks should run on both workers"
    assert len({a["pid"] for a in attempts}) >= 3, "tasks run in separate task processes"
    # Task CPU: positive, and no more than the tasks' wall time allows (one thread each, plus ZeroMQ's I/O thread).
    for kind in ("map", "reduce"):
        busy = sum(a["end"] - a["start"] for a in attempts if a["kind"] == kind)
        assert 0 < report["counters"][f"{kind}_cpu_seconds"] <= 1.5 * busy + 0.2, kind


def test_pipelined_shuffle_starts_before_maps_finish(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 400_000, seed=3, vocabulary=500)
    output = tmp_path / "out"
    report = run_job(client, "slow_map", [source], output, num_reduces=2, split_size=100_000, spill_records=5_000)
    assert report["num_maps"] >= 4
    assert report["first_shuffle_at"] < report["last_map_commit_at"]
    map_ends = sorted(a["end"] for a in report["attempts"] if a["kind"] == "map")
    assert report["first_shuffle_at"] < map_ends[0], "a spill should reach a reducer before any map commits"
    assert output_dict(output) == word_counts(source)


def test_a_reduces_progress_rises_as_it_reduces(client: Client, tmp_path: Path) -> None:
    """A reduce reported 0.5 once its input was in and nothing more until it committed: a 2 s reduce showed "reduce
    50%" all along. Its progress now rises with the part of its input it has reduced."""
    source = tmp_path / "in.txt"
    generate_text(source, 20_000, seed=5, vocabulary=500)  # 500 words: 2 s of the reduce's 4 ms a key
    spec = build_spec(load_job_file(job_path("slow_reduce")), [str(source)], str(tmp_path / "out"), num_reduces=1)
    job_id = client.submit(spec)
    seen = []
    deadline = time.monotonic() + 60
    while (status := client.status(job_id))["state"] == "running":
        assert time.monotonic() < deadline, "the job still running after 60 s"
        seen.append(status["reduce_fraction"])
        time.sleep(0.05)
    assert status["state"] == "succeeded", status
    during = [fraction for fraction in seen if 0.5 < fraction < 1.0]
    assert len(set(during)) >= 2 and during == sorted(during), seen
    assert output_dict(tmp_path / "out") == word_counts(source)


def test_blocking_and_pipelined_outputs_identical(client: Client, zipf_text: Path, tmp_path: Path) -> None:
    outputs = {}
    for mode in ("pipelined", "blocking"):
        output = tmp_path / mode
        report = run_job(
            client, "wordcount", [zipf_text], output, num_reduces=2, split_size=1 << 20, spill_records=50_000, mode=mode
        )
        assert report["mode"] == mode
        outputs[mode] = [p.read_bytes() for p in sorted(output.glob("part-*"))]
        if mode == "blocking":
            first_commit = min(a["end"] for a in report["attempts"] if a["kind"] == "map")
            assert report["first_shuffle_at"] >= first_commit, "blocking mode must not push before a commit"
    assert outputs["pipelined"] == outputs["blocking"]


def test_without_combiner(client: Client, zipf_text: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    report = run_job(
        client, "wordcount_nocombine", [zipf_text], output, num_reduces=2, split_size=1 << 20, spill_records=100_000
    )
    assert output_dict(output) == word_counts(zipf_text)
    assert report["counters"]["combine_input_records"] == 0
    assert report["counters"]["reduce_input_records"] == report["counters"]["map_output_records"]


def test_small_input_still_gives_every_map_slot_a_task(tmp_path: Path) -> None:
    # 3 MB is one default (128 MB) split, but the cluster has three map slots: the input is cut in three, one per slot.
    source = tmp_path / "in.txt"
    generate_text(source, 3_000_000, seed=4)
    output = tmp_path / "out"
    with LocalCluster(workers=3, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address)
        try:
            report = run_job(client, "wordcount", [source], output, num_reduces=2)
        finally:
            client.close()
    assert report["num_maps"] == 3
    assert output_dict(output) == word_counts(source)


def test_empty_input(client: Client, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    output = tmp_path / "out"
    report = run_job(client, "wordcount", [empty], output, num_reduces=2)
    assert report["num_maps"] == 1, "an input of empty files is one map of no records (hop.planning)"
    assert [p.read_text() for p in sorted(output.glob("part-*"))] == ["", ""]
    assert (output / "_SUCCESS").exists()


@pytest.mark.parametrize("mode", ["pipelined", "blocking"])
def test_the_hooks_of_a_map_over_empty_files_run_once(client: Client, tmp_path: Path, mode: str) -> None:
    """An input of empty files made no map on hop's engine, so ``mapper_init``/``mapper_final`` never ran and
    their pairs were missing, where ``--engine spark`` runs one partition of no records and gives them (and mrjob
    and Hadoop a map per empty file). It is now one map reading them all, in either mode, as on Spark."""
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "b.txt").write_text("")
    output = tmp_path / "out"
    report = run_job(client, "hooked_wordcount", [tmp_path / "a.txt", tmp_path / "b.txt"], output, mode=mode)
    assert report["num_maps"] == 1
    assert output_dict(output) == {"map tasks": 1, "lines": 0, "reducer started": True, "reducer ended": None}


def test_single_huge_key(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "same.txt"
    source.write_text("same same same same\n" * 100_000)
    output = tmp_path / "out"
    run_job(client, "wordcount_nocombine", [source], output, num_reduces=3, split_size=300_000, spill_records=50_000)
    assert read_output(output) == [("same", 400_000)]


def test_many_distinct_keys(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "distinct.txt"
    with open(source, "w") as file:
        for i in range(300_000):
            file.write(f"k{i:07d} k{(i * 7919) % 300_000:07d}\n")
    output = tmp_path / "out"
    run_job(
        client,
        "wordcount",
        [source],
        output,
        num_reduces=2,
        split_size=2_000_000,
        spill_records=200_000,
        reduce_memory=500_000,
    )
    assert output_dict(output) == word_counts(source)
    assert_sorted_parts(output)


def test_reducer_memory_holds_with_large_values(client: Client, tmp_path: Path) -> None:
    """A reducer fed megabyte values keeps to its --reduce-memory: a run comes in pieces (written to its file as
    they arrive, not held whole as one message) and is read back in blocks cut by bytes (not one block of every
    value in the run). Before, this reducer took the 48 MiB run as one message, then decoded it as one block: its
    peak was about 100 MiB over its start against an 8 MiB budget."""
    source = tmp_path / "numbers.txt"
    source.write_text("".join(f"{n}\n" for n in range(48)))
    output = tmp_path / "out"
    budget = 8 << 20
    run_job(client, "large_values", [source], output, num_reduces=1, reduce_memory=budget)
    assert output_dict(output) == {key: [12, 12 << 20] for key in range(4)}
    report = json.loads((output / "_job.json").read_text())
    (reducer,) = [entry for entry in report["attempts"] if entry["kind"] == "reduce"]
    memory = reducer["memory"]
    # The budget plus a fixed overhead: the pieces in flight (4 of 1 MiB per worker) and one merge stream's blocks.
    assert memory["peak_bytes"] - memory["start_bytes"] < budget + (16 << 20), memory


def test_unicode_and_gzip_and_directories(client: Client, tmp_path: Path) -> None:
    folder = tmp_path / "input"
    folder.mkdir()
    lines = ["naïve café ü 日本 語", "Ωμέγα ж ñ café", "emoji 🎉 🎉 tab\tseparated", "crlf line\r"]
    (folder / "plain.txt").write_text("\n".join(lines * 50) + "\n", encoding="utf-8")
    with gzip.open(folder / "packed.txt.gz", "wt", encoding="utf-8") as file:
        file.write("\n".join(lines * 30))
    with bz2.open(folder / "packed.txt.bz2", "wt", encoding="utf-8") as file:
        file.write("\n".join(lines * 20))
    with lzma.open(folder / "packed.txt.xz", "wt", encoding="utf-8") as file:
        file.write("\n".join(lines * 10) + "\n")
    (folder / "_ignored.txt").write_text("never read\n")
    output = tmp_path / "out"
    run_job(client, "wordcount", [str(folder)], output, num_reduces=2, split_size=500)
    packed = [folder / f"packed.txt{suffix}" for suffix in (".gz", ".bz2", ".xz")]
    expected = word_counts(folder / "plain.txt", *packed)
    assert output_dict(output) == expected
    assert "never" not in expected and output_dict(output)["🎉"] == 220


def test_globs_and_several_files(client: Client, tmp_path: Path) -> None:
    paths = []
    for i in range(3):
        path = tmp_path / f"part{i}.txt"
        generate_text(path, 50_000, seed=i, vocabulary=300)
        paths.append(path)
    output = tmp_path / "out"
    report = run_job(client, "wordcount", [str(tmp_path / "part*.txt")], output, num_reduces=1, split_size=20_000)
    assert report["num_maps"] >= 6
    assert output_dict(output) == word_counts(*paths)


def test_mixed_key_types_are_ordered(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "mixed.txt"
    source.write_text("b a 10 2 none true false 1.5 x,y x,1 a 2 none\n" * 20)
    output = tmp_path / "out"
    run_job(client, "mixed_keys", [source], output, num_reduces=1)
    assert read_output(output) == [
        (None, 40),
        (False, 20),
        (True, 20),
        (1.5, 20),
        (2, 40),
        (10, 20),
        ("a", 40),
        ("b", 20),
        (["x", "1"], 20),
        (["x", "y"], 20),
    ]


def test_multi_step_job(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 100_000, seed=5, vocabulary=1000)
    output = tmp_path / "out"
    report = run_job(client, "two_steps", [source], output, num_reduces=2)
    counts = word_counts(source)
    expected = collections.Counter(counts.values())
    assert output_dict(output) == dict(expected)
    assert len(report["steps"]) == 1
    # The top level's user counters are the run's, summed over both steps; each earlier step's own in its report.
    lines = len(source.read_text(encoding="utf-8").splitlines())
    assert report["counters"]["user"] == {"steps": {"lines": lines, "words": len(counts)}}
    assert report["steps"][0]["counters"]["user"] == {"steps": {"lines": lines}}
    assert json.loads((output / "_job.json").read_text())["counters"]["user"] == report["counters"]["user"]
    assert not list(tmp_path.glob(".out.steps-*")), "intermediate step output must be removed"


def test_jsonl_and_csv_inputs(client: Client, tmp_path: Path) -> None:
    rng = random.Random(1)
    rows = [(f"user{rng.randrange(20)}", rng.randrange(100)) for _ in range(2000)]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps({"user": u, "amount": a}) + "\n" for u, a in rows))
    csv_file = tmp_path / "rows.csv"
    csv_file.write_text("".join(f'"{u}",{a}\n' for u, a in rows))
    expected: collections.Counter[str] = collections.Counter()
    for user, amount in rows:
        expected[user] += amount
    run_job(client, "json_fields", [jsonl], tmp_path / "json_out", split_size=5000)
    run_job(client, "json_fields", [csv_file], tmp_path / "csv_out", input_format="csv", split_size=5000)
    assert output_dict(tmp_path / "json_out") == dict(expected)
    assert output_dict(tmp_path / "csv_out") == dict(expected)


def test_user_error_names_file_offset_and_traceback(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("fine\nfine too\nthis goes boom here\nfine\n")
    output = tmp_path / "out"
    with pytest.raises(JobFailed) as failure:
        run_job(client, "failing_map", [source], output)
    status = failure.value.status
    assert f"{source} byte offset 14" in status["error"]
    assert "cannot handle boom" in status["error"]
    assert "failing_map.py" in status["traceback"] and "RuntimeError" in status["traceback"]
    assert not (output / "_SUCCESS").exists()
    report = json.loads((output / "_job.json").read_text())
    assert report["status"] == "failed"
    assert not list(output.glob("part-*"))


def test_a_value_an_aggregate_cannot_fold_names_aggregate_key_and_record(client: Client, tmp_path: Path) -> None:
    """``None`` as a key's first value used to vanish (``Sum`` of ``None, 3`` was 3) and a later one failed with
    the engine's ``int + NoneType`` line as the traceback: both now fail naming the aggregate, key and record."""
    first, later = tmp_path / "first.txt", tmp_path / "later.txt"
    first.write_text("x -\nx 3\ny 4\n")
    later.write_text("x 3\nx -\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "optional_values", [first], tmp_path / "out1")
    error = failure.value.status["error"]
    assert f"{first} byte offset 0: 'x -'" in error and "Sum() got None as the first value of key 'x'" in error
    with pytest.raises(JobFailed) as failure:
        run_job(client, "optional_values", [later], tmp_path / "out2")
    status = failure.value.status
    assert f"{later} byte offset 4: 'x -'" in status["error"]
    assert "Sum() could not fold a value of key 'x' (the latest, None)" in status["error"]
    assert "unsupported operand" in status["error"] and "shuffle/buffer.py" not in status["traceback"]


def test_a_map_or_reduce_that_gives_no_pairs_is_told_what_to_yield(client: Client, tmp_path: Path) -> None:
    """A map returning one pair (``return line, 1``) failed with "Sum() could not fold a value of key None ...
    too many values to unpack" and the engine's loop as the traceback; a reduce yielding a value without its key
    with "cannot unpack non-iterable int object". Both now say what the function must give, naming the record."""
    source = tmp_path / "in.txt"
    source.write_text("a b a\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "not_pairs", [source], tmp_path / "out1", job_class="MapReturnsOnePair")
    status = failure.value.status
    assert (
        f"map at {source} byte offset 0: 'a b a' raised NotPairsError: the map gave something other than (key, "
        in (status["error"])
    )
    assert "yield each pair (yield key, value)" in status["error"] and "Sum()" not in status["error"]
    assert "shuffle/buffer.py" not in status["traceback"]
    with pytest.raises(JobFailed) as failure:
        run_job(client, "not_pairs", [source], tmp_path / "out2", job_class="ReduceYieldsValues")
    status = failure.value.status
    assert (
        "reduce at key 'a' raised NotPairsError: the reduce gave something other than (key, value) pairs"
        in (status["error"])
    )
    assert "cannot unpack non-iterable int object" in status["error"] and "hop/tasks.py" not in status["traceback"]


def test_a_generator_that_yields_no_pair_is_shown_at_its_yield(client: Client, tmp_path: Path) -> None:
    """A map or reduce generator yielding a bare value failed with a traceback of one line, the NotPairsError
    itself: the user's code was named nowhere. The traceback is now the ``yield`` that gave the value (through a
    ``yield from`` helper), as the generator was suspended there when the engine read it."""
    source = tmp_path / "in.txt"
    source.write_text("a b a\n")
    jobs = job_path("not_pairs")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "not_pairs", [source], tmp_path / "out1", job_class="MapYieldsValues")
    shown = failure.value.status["traceback"]
    assert f'File "{jobs}", line 25, in map\n    yield from self.words(line)\n' in shown, shown
    assert f'File "{jobs}", line 29, in words\n    yield word.lower()  # should be' in shown, shown
    assert shown.rstrip().splitlines()[-1].startswith("hop.usertrace.NotPairsError: the map gave something other")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "not_pairs", [source], tmp_path / "out2", job_class="ReduceYieldsValues")
    shown = failure.value.status["traceback"]
    assert f'File "{jobs}", line 20, in reduce\n    yield sum(counts)' in shown, shown


def test_a_combine_without_pairs_or_its_key_or_a_bad_partition_shows_no_engine_frame(
    client: Client, tmp_path: Path
) -> None:
    """A hand-written combine yielding a bare value failed with the engine's frames as its traceback (taskproc.py,
    tasks.py, shuffle/buffer.py's check) and not a line of the user's; one changing its key too. The first is now a
    NotPairsError shown at the user's ``yield``; the second keeps its message (naming the key), without those
    frames, as does a partition out of range."""
    source = tmp_path / "in.txt"
    source.write_text("a b a\n")
    jobs = job_path("not_pairs")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "not_pairs", [source], tmp_path / "out1", job_class="CombineYieldsValues")
    status = failure.value.status
    assert status["error"].startswith("combine at key 'a' raised NotPairsError: the combine gave something other")
    assert status["traceback"].startswith(f'Traceback (most recent call last):\n  File "{jobs}", line 40, in combine')
    with pytest.raises(JobFailed) as failure:
        run_job(client, "not_pairs", [source], tmp_path / "out2", job_class="CombineChangesKey")
    status = failure.value.status
    assert "combine('a', ...) yielded key 'A'; a combiner must keep the key it was given" in status["error"]
    assert not status.get("traceback"), status["traceback"]
    with pytest.raises(JobFailed) as failure:
        run_job(client, "not_pairs", [source], tmp_path / "out3", job_class="PartitionOutOfRange", num_reduces=2)
    status = failure.value.status
    assert "partition('a') returned 3; expected an int in range(2)" in status["error"], status["error"]
    assert not status.get("traceback"), status["traceback"]


@pytest.mark.parametrize(
    ("job_class", "error", "line"),
    [
        ("MapYieldsCodes", "map at {source} byte offset 0: 'en Main_Page 10' raised NotPairsError: the map gave "
                           "something other than (key, value) pairs (TypeError: a str is not a (key, value) pair: "
                           "'en')", "yield line.split()[0]  # should be"),
        ("MapYieldsRecords", "map at {source} byte offset 0: 'en Main_Page 10' raised NotPairsError: the map gave "
                             "something other than (key, value) pairs (TypeError: a dict is not a (key, value) pair: "
                             "{{'word': 'en', 'count': 1}})", "yield {\"word\": word, \"count\": 1}"),
        ("CombineYieldsSet", "combine at key 'de' raised NotPairsError: the combine gave something other than "
                             "(key, value) pairs (TypeError: a set is not a (key, value) pair: ",
                             "yield {code, sum(counts)}"),
        ("ReduceYieldsText", "reduce at key 'de' raised NotPairsError: the reduce gave something other than "
                             "(key, value) pairs (TypeError: a str is not a (key, value) pair: 'de')",
                             "yield code  # should"),
    ],
)  # fmt: skip
def test_a_str_dict_or_set_that_python_would_unpack_as_a_pair_is_refused(
    client: Client, tmp_path: Path, job_class: str, error: str, line: str
) -> None:
    """A map yielding a two-letter code (``yield "en"``) ran and wrote key "e" with value "n"; a two-key dict gave
    its keys as a pair, a two-item set its items in no set order; a reduce yielding its key alone wrote "d" -> "e".
    The jobs succeeded with wrong output. Such objects are refused now, shown at the user's ``yield``."""
    source = tmp_path / "in.txt"
    source.write_text("en Main_Page 10\nde Haupt 5\nen Foo 3\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "not_pairs", [source], tmp_path / "out", job_class=job_class)
    status = failure.value.status
    assert status["error"].startswith(error.format(source=source)), status["error"]
    assert f'File "{job_path("not_pairs")}", line ' in status["traceback"], status["traceback"]
    assert line in status["traceback"] and "shuffle/" not in status["traceback"], status["traceback"]


def test_an_init_or_final_hook_that_yields_no_pair_is_shown_at_its_yield(client: Client, tmp_path: Path) -> None:
    """A ``reducer_final`` yielding a bare value failed with "reduce task 1: too many values to unpack (expected 2)"
    and the engine's frames (taskproc.py, tasks.py's writing of the hook's pairs) as its traceback. It is now a
    NotPairsError naming the hook, shown at the user's ``yield``."""
    source = tmp_path / "in.txt"
    source.write_text("a b a\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "not_pairs", [source], tmp_path / "out", job_class="FinalHookYieldsValues")
    status = failure.value.status
    assert status["error"].startswith("reducer_final raised NotPairsError: the reducer_final gave something other")
    shown = f'Traceback (most recent call last):\n  File "{job_path("not_pairs")}", line 59, in reducer_final'
    assert status["traceback"].startswith(shown), status["traceback"]


def test_a_combine_and_reduce_given_as_two_instances_of_one_aggregate_run(client: Client, tmp_path: Path) -> None:
    """``combine = Sum()`` and ``reduce = Sum()`` (or ``Step(combiner=Sum(), reducer=Sum())``) were refused with
    "reduce is the aggregate Sum(), so combine must be the same aggregate": only one instance shared by both passed.
    Two instances of one aggregate with the same settings are the same aggregate; ``TopK(3)`` and ``TopK(5)`` are not.
    """
    job = tmp_path / "sums.py"
    job.write_text(
        "from hop import Job, Step\nfrom hop.aggregates import Sum, TopK\n\n\n"
        "class Attributes(Job):\n    def map(self, offset, line):\n        for word in line.split():\n"
        "            yield word, 1\n\n    combine = Sum()\n    reduce = Sum()\n\n\n"
        "class Steps(Attributes):\n    def steps(self):\n"
        "        return [Step(mapper=self.map, combiner=Sum(), reducer=Sum()),\n"
        "                Step(combiner=TopK(2), reducer=TopK(2))]\n\n\n"
        "class Different(Attributes):\n    combine = TopK(3)\n    reduce = TopK(5)\n"
    )
    source = tmp_path / "in.txt"
    source.write_text("a b a\nc a b\n")
    for name, expected in (("Attributes", {"a": 3, "b": 2, "c": 1}), ("Steps", {"a": [3], "b": [2], "c": [1]})):
        spec = build_spec(load_job_file(str(job), name), [str(source)], str(tmp_path / name), num_reduces=2)
        run_steps(client, spec, progress=False, timeout=60)
        assert output_dict(tmp_path / name) == expected
    with pytest.raises(ValueError, match=r"reduce is the aggregate TopK\(5\), so combine must be the same"):
        load_job_file(str(job), "Different")


def test_a_counter_amount_that_is_not_an_int_fails_instead_of_being_truncated(client: Client, tmp_path: Path) -> None:
    """``increment_counter("size", "kb", 0.5)`` per line counted 0 (``int(0.5)``) and the job succeeded; it now fails
    in the user's map, as mrjob's increment_counter does, and an int amount still counts."""
    job = tmp_path / "sizes.py"
    job.write_text(
        "from hop import Job\n\n\nclass Sizes(Job):\n    def map(self, offset, line):\n"
        "        self.increment_counter('size', 'lines', 1)\n"
        "        self.increment_counter('size', 'kb', len(line) / 1000)\n        yield 'lines', 1\n"
    )
    source = tmp_path / "in.txt"
    source.write_text("x" * 500 + "\n")
    spec = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "out"))
    with pytest.raises(JobFailed) as failure:
        run_steps(client, spec, progress=False, timeout=60)
    status = failure.value.status
    assert "increment_counter('size', 'kb', 0.5): the amount must be an int, not float" in status["error"]
    assert f'{job}", line 7, in map' in status["traceback"]
    job.write_text(job.read_text().replace("len(line) / 1000", "len(line) // 100"))
    spec = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "out2"))
    report = run_steps(client, spec, progress=False, timeout=60)
    assert report["counters"]["user"] == {"size": {"lines": 1, "kb": 5}}


@pytest.mark.parametrize("reduce", ["combine = reduce = Sum()", "def reduce(self, key, values):\n        yield key, 1"])
def test_a_nan_key_fails_the_job_with_the_reason(client: Client, tmp_path: Path, reduce: str) -> None:
    """A float NaN key came out as one output line per record, at no fixed place: unsorted parts (``2.5`` before
    ``0.5``), a different reducer on every run. It now fails the job, whether the map output is sorted or folded,
    naming the map call and its record (found by mapping the input again, as for a key the shuffle cannot encode)."""
    job, source = write_nan_keys_job(tmp_path, reduce)
    spec = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "out"), num_reduces=2)
    with pytest.raises(JobFailed) as failure:
        run_steps(client, spec, progress=False, timeout=60)
    error = failure.value.status["error"]
    assert f"map at {source} byte offset 0: 'aaaaa x a' raised NanKeyError: map output key nan is or holds" in error
    assert "map output key nan is or holds a float NaN, which cannot be a key" in error
    assert "yield None (or a str) for a missing number" in error
    assert failure.value.status["traceback"] is None, "the engine's frames (the spill that found it) say nothing"


def test_a_list_key_names_the_record_without_the_engines_frames(client: Client, tmp_path: Path) -> None:
    """A map yielding a list as its key failed with the right reason but printed the engine's loop (hop/tasks.py,
    shuffle/buffer.py) as its traceback; the reason now comes alone, with the record."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "list_keys", [source], tmp_path / "out")
    status = failure.value.status
    assert (
        f"map at {source} byte offset 0: 'a b' raised UnhashableKeyError: map output key ['a', 'b'] is a list"
        in (status["error"])
    )
    assert "hop/tasks.py" not in status["traceback"] and "shuffle/buffer.py" not in status["traceback"]


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("datetime.date(2020, 1, 2)", "(type date) cannot be encoded by the shuffle"),
        (
            "('a', Folded('X'))",
            "holding 'X' (type Folded), cannot be encoded by the shuffle: a key holds a plain str, not a Folded",
        ),
    ],
)
def test_a_key_of_another_type_names_the_record(client: Client, tmp_path: Path, key: str, reason: str) -> None:
    """A hashable key that has no place in the keys' order (a date, a str subclass comparing its own way inside a
    tuple) failed the job as ``map task 0: key ... is not a msgpack-able key`` under the engine's traceback (the
    spill that sorted the keys), without the record; it is now found and named as an unencodable value is."""
    job = tmp_path / "odd_keys.py"
    job.write_text(
        "import datetime\nfrom hop import Job\n\n\nclass Folded(str):\n"
        "    def __eq__(self, other):\n        return self.lower() == str(other).lower()\n\n"
        "    def __hash__(self):\n        return hash(self.lower())\n\n\n"
        "class OddKeys(Job):\n    def map(self, offset, line):\n"
        f"        yield ({key} if line == 'odd' else line), 1\n"
    )
    source = tmp_path / "in.txt"
    source.write_text("a\nodd\nb\n")
    spec = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "out"), num_reduces=2)
    with pytest.raises(JobFailed) as failure:
        run_steps(client, spec, progress=False, timeout=60)
    status = failure.value.status
    assert f"map at {source} byte offset 2: 'odd' raised UnencodableRecordError: map output key" in status["error"]
    assert reason in status["error"]
    assert status["traceback"] is None, "the engine's frames (the spill that found it) say nothing"


@pytest.mark.parametrize("mode", ["pipelined", "blocking"])
def test_intenum_keys_reach_a_hand_written_combine_and_reduce_as_their_ints(
    client: Client, tmp_path: Path, mode: str
) -> None:
    """A map yielding IntEnum members as keys (alone or in a tuple) failed the job unless its reduce was a built-in
    aggregate ("map output key <Color.RED: 1> (type Color) cannot be encoded by the shuffle"), whose output had the
    ints. The shuffle sends a member as its int, and combine and reduce now receive that int, as the aggregate's
    output has it (and Spark's, tests/test_spark.py)."""
    source = tmp_path / "colors.txt"
    source.write_text("red green red\ngreen red\n")
    run_job(client, "enum_keys", [source], tmp_path / "out", num_reduces=2, mode=mode)
    assert output_dict(tmp_path / "out") == {
        1: ["int", ["int"], 3],
        2: ["int", ["int"], 2],
        ("pair", 1): ["str,int", ["str,int"], 3],
        ("pair", 2): ["str,int", ["str,int"], 2],
    }


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (
            "{'n': {(1, 2): 'a'}}",
            "NotJSONError: output value {'n': {(1, 2): 'a'}} holds a dict with the key (1, 2) (type tuple), which a "
            "JSON object cannot have",
        ),
        ("'a\\ud800'", "NotUTF8OutputError: its output cannot be written as UTF-8"),
    ],
)
def test_a_reduce_output_json_cannot_write_is_named_without_the_engines_frames(
    client: Client, tmp_path: Path, output: str, reason: str
) -> None:
    """A reduce yielding a dict with a tuple key failed with the JSON encoder's "keys must be str, int, float, bool
    or None, not tuple" and its frames (json/encoder.py) as the user's traceback; one yielding a lone surrogate had
    hop's frame writing the line as its traceback. Both now name the output and the key, without a traceback."""
    job = tmp_path / "bad_output.py"
    job.write_text(
        "from hop import Job\n\n\nclass BadOutput(Job):\n    def map(self, offset, line):\n        yield line, 1\n\n"
        f"    def reduce(self, key, values):\n        yield key, {output} if key == 'b' else 1\n"
    )
    source = tmp_path / "in.txt"
    source.write_text("a\nb\n")
    spec = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "out"), num_reduces=1)
    with pytest.raises(JobFailed) as failure:
        run_steps(client, spec, progress=False, timeout=60)
    status = failure.value.status
    assert f"reduce at key 'b' raised {reason}" in status["error"]
    assert status["traceback"] is None, status["traceback"]
    # Skipped (--skip-bad-records), the key's listing had those frames as its traceback: it has none either.
    skipped = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "skipped"), num_reduces=1)
    skipped.options["skip_bad_records"] = 1
    report = run_steps(client, skipped, progress=False, timeout=60)
    assert report["counters"]["bad_records_skipped"] == 1
    (listed,) = map(json.loads, (tmp_path / "skipped" / "_bad_records" / "reduce-00000.jsonl").read_text().splitlines())
    assert listed["key"] == "'b'" and listed["error"].startswith(reason), listed
    assert listed["traceback"] is None, listed["traceback"]


@pytest.mark.parametrize(
    ("helper", "shown"),
    [
        ("def tokens(line)\n    return line.split()\n", "line 1\n    def tokens(line)\n"),
        ("import json\n\nTABLE = json.loads('{')\n", "line 3, in <module>\n    TABLE = json.loads"),
    ],
    ids=["syntax", "raises"],
)
def test_a_module_the_map_imports_as_it_runs_fails_showing_the_users_frames_alone(
    client: Client, tmp_path: Path, helper: str, shown: str
) -> None:
    """A module beside the job that its map imports as it runs (an import inside the method) and that has a syntax
    error, or raises as it is imported: the traceback held the import machinery's frames and hop's loader's
    between the map's line and the module's (<frozen importlib._bootstrap>, hop/jobspec.py exec_module), which
    Python's own loader hides. It shows the user's frames alone, as a job file that fails to import does."""
    (tmp_path / "helper.py").write_text(helper)
    job = tmp_path / "lazy.py"
    job.write_text(
        "from hop import Job\n\n\nclass Lazy(Job):\n    def map(self, offset, line):\n"
        "        import helper\n        yield line, 1\n"
    )
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    spec = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "out"), num_reduces=1)
    with pytest.raises(JobFailed) as failure:
        run_steps(client, spec, progress=False, timeout=60)
    traceback = failure.value.status["traceback"]
    assert traceback.startswith(f'Traceback (most recent call last):\n  File "{job}", line 6, in map\n'), traceback
    assert f'  File "{tmp_path / "helper.py"}", {shown}' in traceback, traceback
    assert "importlib" not in traceback and "hop/" not in traceback, traceback
    # No record is to blame: --skip-bad-records is not suggested, and given, skips none (it skipped N, then failed).
    assert "--skip-bad-records" not in str(failure.value), failure.value
    source.write_text("a\nb\nc\n")
    skipping = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "skipping"), num_reduces=1)
    skipping.options["skip_bad_records"] = 5
    with pytest.raises(JobFailed) as again:
        run_steps(client, skipping, progress=False, timeout=60)
    assert "byte offset 0: 'a'" in str(again.value) and "skipped" not in str(again.value), again.value
    assert not (tmp_path / "skipping" / "_bad_records").exists()


def test_ints_past_64_bits_are_exact(client: Client, tmp_path: Path) -> None:
    """msgpack's ints stop at 64 bits; combined ``Sum`` states past them used to fail the map as "cannot be
    encoded". Both shuffles carry them now, as values and as keys."""
    (tmp_path / "sums.txt").write_text(f"a {2**62}\nb {2**70}\nc -{2**80}\n" * 40)
    (tmp_path / "keys.txt").write_text(f"{2**65} {3**50} 7 {2**65}\n" * 30)
    for mode in ("pipelined", "blocking"):
        sums, keys = tmp_path / f"sums-{mode}", tmp_path / f"keys-{mode}"
        run_job(client, "optional_values", [tmp_path / "sums.txt"], sums, num_reduces=2, mode=mode)
        assert dict(read_output(sums)) == {"a": 40 * 2**62, "b": 40 * 2**70, "c": -40 * 2**80}
        run_job(client, "mixed_keys", [tmp_path / "keys.txt"], keys, num_reduces=2, mode=mode)
        assert dict(read_output(keys)) == {2**65: 60, 3**50: 30, 7: 30}


def test_ints_past_python_s_4300_digit_limit_are_read_and_written(client: Client, tmp_path: Path) -> None:
    """Python refuses int <-> str conversions past 4,300 digits by default: a reduce writing such an int failed as
    "reduce task 1: Exceeds the limit (4300 digits) for integer string conversion" under the engine's traceback,
    and a JSON line holding one could not be read. Task processes lift the limit: ints of any size."""
    big = "1" + "0" * 5000  # (the digits as text: this process keeps the limit)
    job = tmp_path / "big_ints.py"
    job.write_text(
        "from hop import Job\nfrom hop.aggregates import Sum\n\n\nclass BigInts(Job):\n"
        "    input_format = 'jsonl'\n    combine = reduce = Sum()\n\n    def map(self, offset, number):\n"
        "        yield number % 2, number\n"
    )
    source = tmp_path / "in.jsonl"
    source.write_text(f"{big}\n{big}\n3\n")
    spec = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "out"), num_reduces=2)
    run_steps(client, spec, progress=False, timeout=60)
    lines = sorted(line for part in sorted((tmp_path / "out").glob("part-*")) for line in part.read_text().splitlines())
    assert lines == [f"0\t2{big[1:]}", "1\t3"]


def test_a_directory_of_small_files_is_packed_into_few_maps(client: Client, tmp_path: Path) -> None:
    """One map per file made 3,000 files of 200 bytes a job of 11 s; consecutive small files now share a map,
    which still names the file a failing record came from."""
    folder = tmp_path / "in"
    folder.mkdir()
    expected: collections.Counter[str] = collections.Counter()
    for number in range(300):
        words = [f"w{(number * 7 + i) % 13}" for i in range(20)]
        expected.update(words)
        (folder / f"part-{number:04d}.txt").write_text(" ".join(words) + "\n")
    report = run_job(client, "wordcount", [folder], tmp_path / "out")
    maps = {attempt["task_id"] for attempt in report["attempts"] if attempt["kind"] == "map"}
    assert len(maps) <= 2, maps  # (a 1 MiB minimum split: the whole input fits one, or one per slot)
    assert output_dict(tmp_path / "out") == dict(expected)
    (folder / "part-0200.txt").write_text("fine\nthis goes boom here\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "failing_map", [folder], tmp_path / "out2")
    assert f"{folder / 'part-0200.txt'} byte offset 5" in failure.value.status["error"]


def test_existing_output_refused_unless_overwrite(client: Client, zipf_text: Path, tmp_path: Path) -> None:
    from hop.outputs import OutputExistsError

    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("precious")
    with pytest.raises(OutputExistsError, match="not empty"):
        run_job(client, "wordcount", [zipf_text], output)
    assert (output / "keep.txt").read_text() == "precious"
    run_job(client, "wordcount", [zipf_text], output, overwrite=True)
    assert not (output / "keep.txt").exists() and (output / "_SUCCESS").exists()


def test_missing_input_is_a_clear_error(client: Client, tmp_path: Path) -> None:
    from hop.client import JobRejected

    with pytest.raises(JobRejected, match="does not exist"):
        run_job(client, "wordcount", [tmp_path / "nope.txt"], tmp_path / "out")


def test_a_job_writing_the_output_of_a_running_job_is_refused(client: Client, tmp_path: Path) -> None:
    """Two jobs writing one output directory would mix their parts, and with --overwrite the second one deleted
    the first one's: the coordinator refuses the second while the first runs, and takes it once that has ended."""
    from hop.client import JobRejected

    source = tmp_path / "in.txt"
    source.write_text("a b\n" * 2000)
    spec = build_spec(load_job_file(job_path("slow_map")), [str(source)], str(tmp_path / "out"), overwrite=True)
    first = client.submit(spec)
    try:
        with pytest.raises(JobRejected, match=f"is being written by job {first}, still running; wait for it, stop"):
            client.submit(spec)
    finally:
        client.stop(first)
    client.wait(first, timeout=30)
    second = client.submit(spec)
    assert client.wait(second, timeout=60)["state"] == "succeeded"


def test_overwriting_what_a_running_job_reads_or_writes_is_refused(client: Client, tmp_path: Path) -> None:
    """``--overwrite`` of a folder holding a running job's input files (a team's ``hop submit ... -o data/
    --overwrite`` while a job reads ``data/in.txt``) deleted them under that job, which failed (``input file ... no
    longer exists``); of a folder holding its output, that output. The coordinator refuses it while the job runs,
    naming the job, and leaves the folder as it was; once the job has ended it is taken."""
    from hop.client import JobRejected

    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    data.mkdir()
    elsewhere.mkdir()
    source = data / "in.txt"
    source.write_text("a b\n" * 8000)  # (slow_map: 0.5 ms a line, so the job runs for seconds)
    (elsewhere / "c.txt").write_text("c\n")
    counts = tmp_path / "runs" / "counts"
    first = client.submit(build_spec(load_job_file(job_path("slow_map")), [str(source)], str(counts), num_reduces=2))
    try:
        for target, what in ((data, f"holds {source}, an input of job {first}"), (counts.parent, f"holds {counts}")):
            spec = build_spec(load_job_file(job_path("wordcount")), [str(elsewhere)], str(target), overwrite=True)
            with pytest.raises(JobRejected, match=f"output directory {target} {what}"):
                client.submit(spec)
        assert source.exists() and counts.is_dir(), "the refused job cleared its output"
    finally:
        status = client.wait(first, timeout=60)
    assert status["state"] == "succeeded", status.get("error")
    assert output_dict(counts) == {"a": 8000, "b": 8000}
    spec = build_spec(load_job_file(job_path("wordcount")), [str(elsewhere)], str(data), overwrite=True)
    assert client.wait(client.submit(spec), timeout=60)["state"] == "succeeded"
    assert output_dict(data) == {"c": 1} and not source.exists()


def test_a_job_reading_the_output_of_a_running_job_is_refused(client: Client, tmp_path: Path) -> None:
    """A job given the output directory of a job still running (a team's ``hop submit jobs/topk.py counts/`` while
    the word count writes ``counts/``) read the part files committed so far and succeeded on part of the data,
    silently (or said the directory held no file). It is refused, naming the running job, whether the directory or a
    file, a glob or a folder around it is given; once that job has ended it is taken."""
    from hop.client import JobRejected

    source = tmp_path / "in.txt"
    source.write_text("a b\n" * 4000)
    counts, top = tmp_path / "counts", tmp_path / "top"
    first = client.submit(build_spec(load_job_file(job_path("slow_map")), [str(source)], str(counts), num_reduces=2))
    for given in (counts, counts / "part-00000", tmp_path / "count*", tmp_path):
        with pytest.raises(JobRejected, match=f"the output of job {first}, still running: its part files"):
            client.submit(build_spec(load_job_file(job_path("topk")), [str(given)], str(top)))
    assert client.wait(first, timeout=60)["state"] == "succeeded"
    after = client.submit(build_spec(load_job_file(job_path("topk")), [str(counts)], str(top)))
    assert client.wait(after, timeout=60)["state"] == "succeeded"
    assert output_dict(top) == {"top": [[4000, "b"], [4000, "a"]]}


def test_generic_combine_path_matches_aggregate_path(client: Client, zipf_text: Path, tmp_path: Path) -> None:
    fast, generic = tmp_path / "fast", tmp_path / "generic"
    run_job(client, "wordcount", [zipf_text], fast, num_reduces=2, split_size=1 << 20, spill_records=100_000)
    report = run_job(
        client, "wordcount_generic", [zipf_text], generic, num_reduces=2, split_size=1 << 20, spill_records=100_000
    )
    assert [p.read_bytes() for p in sorted(fast.glob("part-*"))] == [
        p.read_bytes() for p in sorted(generic.glob("part-*"))
    ]
    assert report["counters"]["combine_output_records"] == report["counters"]["reduce_input_records"]


def test_mean_and_max_aggregates(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 200_000, seed=11, vocabulary=2000)
    lengths: dict[str, list[int]] = collections.defaultdict(list)
    for word in source.read_text(encoding="utf-8").split():
        lengths[word[0]].append(len(word))
    run_job(client, "mean_length", [source], tmp_path / "mean", num_reduces=2, job_class="WordLengths")
    run_job(client, "mean_length", [source], tmp_path / "max", num_reduces=2, job_class="LongestWords")
    means = output_dict(tmp_path / "mean")
    assert means.keys() == lengths.keys()
    for letter, values in lengths.items():
        assert means[letter] == pytest.approx(sum(values) / len(values), rel=1e-12)
    assert output_dict(tmp_path / "max") == {letter: max(values) for letter, values in lengths.items()}


def test_topk_and_count_distinct_aggregates(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 200_000, seed=12, vocabulary=2000)
    words: dict[str, list[str]] = collections.defaultdict(list)
    for word in source.read_text(encoding="utf-8").split():
        words[word[0]].append(word)
    settings = {"num_reduces": 2, "split_size": 50_000}
    run_job(client, "mean_length", [source], tmp_path / "top", job_class="LongestAndDistinct", **settings)
    run_job(client, "mean_length", [source], tmp_path / "distinct", job_class="DistinctWords", **settings)
    expected_top = {letter: sorted(map(len, group), reverse=True)[:3] for letter, group in words.items()}
    assert output_dict(tmp_path / "top") == expected_top
    assert output_dict(tmp_path / "distinct") == {letter: len(set(group)) for letter, group in words.items()}


def test_skip_bad_records_lists_them(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("fine\nboom one\nfine\nboom two\nlast\n")
    output = tmp_path / "out"
    report = run_job(client, "failing_map", [source], output, options={"skip_bad_records": 2})
    assert output_dict(output) == {"fine": 2, "last": 1}
    assert report["counters"]["bad_records_skipped"] == 2
    files = sorted((output / "_bad_records").glob("*.jsonl"))
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert [(b["offset"], b["record"]) for b in lines] == [(5, "boom one"), (19, "boom two")]
    assert all("cannot handle boom" in b["error"] and "failing_map.py" in b["traceback"] for b in lines)
    with pytest.raises(JobFailed) as failure:
        run_job(client, "failing_map", [source], tmp_path / "out2", options={"skip_bad_records": 1})
    assert "more than --skip-bad-records 1" in failure.value.status["error"]
    assert "byte offset 5" in failure.value.status["error"] and "byte offset 19" in failure.value.status["error"]
    assert failure.value.status["error"].startswith("map task 0: 2 bad records"), "not 'map at' the last record"
    report = json.loads((tmp_path / "out2" / "_job.json").read_text())
    assert "cannot handle boom" in report["traceback"] and "hop/tasks.py" not in report["traceback"]
    # The reducers were waiting for the map: the report says they were ended with the job, not "running".
    reduces = [a for a in report["attempts"] if a["kind"] == "reduce"]
    assert reduces and all(a["status"] == "killed" and a["end"] and a["error"] == "the job failed" for a in reduces)


def test_skip_bad_records_lists_a_jsonl_record_as_its_line(client: Client, tmp_path: Path) -> None:
    """A skipped jsonl record was listed as the Python repr of its dict ("{'word': 'boom', 'n': 1}"), which no
    JSON reader takes back: it is listed as its line, as read, so it can be fixed and fed again."""
    source = tmp_path / "in.jsonl"
    bad = '{"word": "boom",  "n": 1, "ok": true}'
    source.write_text('{"word": "fine"}\n' + bad + '\n{"word": "last"}\n')
    output = tmp_path / "out"
    run_job(client, "failing_json_map", [source], output, options={"skip_bad_records": 1})
    assert output_dict(output) == {"fine": 1, "last": 1}
    (entry,) = [
        json.loads(line) for f in (output / "_bad_records").glob("*.jsonl") for line in f.read_text().splitlines()
    ]
    assert (entry["file"], entry["offset"], entry["record"]) == (str(source), 17, bad)


def test_skip_bad_records_skips_unreadable_lines_too(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(b"a b\nbad \xff\nb c\n")
    output = tmp_path / "out"
    report = run_job(client, "wordcount", [source], output, options={"skip_bad_records": 1})
    assert output_dict(output) == {"a": 1, "b": 2, "c": 1}
    assert report["counters"]["bad_records_skipped"] == 1
    (entry,) = [
        json.loads(line) for f in (output / "_bad_records").glob("*.jsonl") for line in f.read_text().splitlines()
    ]
    assert (entry["file"], entry["offset"]) == (str(source), 4) and "not valid UTF-8" in entry["error"]
    with pytest.raises(JobFailed, match="byte offset 4 is not valid UTF-8"):
        run_job(client, "wordcount", [source], tmp_path / "strict")
    # Past the limit the error lists the bad lines; it used to say the map failed "at" the good line read last.
    source.write_bytes(b"a b\nbad \xff\nb c\n\xfe\nd\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "wordcount", [source], tmp_path / "over", options={"skip_bad_records": 1})
    error = failure.value.status["error"]
    assert error.startswith("map task 0: 2 bad records in one map task, more than --skip-bad-records 1: "), error
    assert "byte offset 4" in error and "byte offset 14" in error and "byte offset 10" not in error, error


def test_a_job_failed_by_one_bad_record_says_how_to_skip_it(client: Client, tmp_path: Path) -> None:
    """A job failed by one bad record (a line that cannot be read, a map or reduce call that raised) named the
    record but not what to do about it: ``--skip-bad-records`` runs past it. A failure that option does not skip (an
    aggregate refusing a value, a key that cannot be one, ``sys.exit()``) says nothing of it. The hint names where
    the skipped records would be listed, the run's ``OUT/_bad_records`` (it said ``OUTPUT/_bad_records`` word for
    word), also when an earlier step fails, whose own output is in the run's scratch folder."""
    (tmp_path / "bad.txt").write_bytes(b"a b\nbad \xff\nbad c\nboom\n")
    (tmp_path / "bad.jsonl").write_text('{"word": "a"}\n{"word": \n')
    (tmp_path / "boom.jsonl").write_text('{"word": "boom"}\n')
    (tmp_path / "ok.txt").write_text("a b\nbad c\nboom\n")
    (tmp_path / "optional.txt").write_text("x 1\ny -\n")
    (tmp_path / "mixed.py").write_text(
        "from hop import Job\nfrom hop.aggregates import Sum\n\n\nclass Mixed(Job):\n"
        "    def map(self, offset, line):\n        yield 'k', line if offset else 1\n\n    combine = reduce = Sum()\n"
    )
    cases = [
        ("wordcount", "bad.txt", None, "byte offset 4 is not valid UTF-8", "records"),
        ("failing_json_map", "bad.jsonl", None, "byte offset 14 is not JSON", "records"),
        ("failing_json_map", "boom.jsonl", None, "raised RuntimeError: cannot handle boom", "records"),
        ("failing_reduce", "ok.txt", None, "reduce at key 'bad' raised ValueError: refusing bad", "keys"),
        ("two_steps", "bad.txt", None, "byte offset 4 is not valid UTF-8", "records"),  # (its first step's map)
        ("task_misuse", "ok.txt", "ExitsInMap", "called sys.exit(2)", None),
        ("list_keys", "ok.txt", None, "is a list, which cannot be a key", None),
        ("optional_values", "optional.txt", None, "Sum() got None", None),
        (str(tmp_path / "mixed.py"), "ok.txt", None, "Sum() could not fold a value of key 'k'", None),
    ]
    for number, (job, source, job_class, reason, hint) in enumerate(cases):
        job_file = job if job.endswith(".py") else job_path(job)
        spec = build_spec(load_job_file(job_file, job_class), [str(tmp_path / source)], str(tmp_path / f"o{number}"))
        with pytest.raises(JobFailed) as failure:
            run_steps(client, spec, progress=False, timeout=120)
        error = failure.value.status["error"]
        assert reason in error, error
        if hint is None:
            assert "--skip-bad-records" not in error, error
        else:
            listed = f"up to N such {hint} per task (listed in {spec.output}/_bad_records)"
            assert "; pass --skip-bad-records N to skip " in error, error
            assert error.endswith(listed), error


@pytest.mark.parametrize(
    ("job_class", "reason"),
    [
        ("CancelledInMap", "map at {source} byte offset 4: 'c boom d' raised CancelledError: the map's request was"),
        ("HaltsInReduce", "reduce at key 'boom' raised Halt: the reduce halted"),
        ("CancelledInSetup", "setup raised CancelledError: the setup's request was cancelled"),
        ("UnprintableInMap", "map at {source} byte offset 4: 'c boom d' raised Unprintable: <exception str() failed>"),
        ("HoldsItself", "map at {source} byte offset 4: 'c boom d' raised UnencodableRecordError: map output value"),
    ],
)
def test_user_errors_python_does_not_print_plainly_name_the_record(
    client: Client, tmp_path: Path, job_class: str, reason: str
) -> None:
    """An error the user's code raised that is no ``Exception`` (``asyncio.CancelledError``, a job's own
    ``BaseException``) ended the task process, and one whose ``str()`` raises failed the task's own error handling:
    each was retried as a crash, four attempts, the job's error naming no record (``exited with code 1 (os._exit()
    in the job's code?)``, ``RuntimeError: this error cannot say what it is``). They fail the job at once, naming the
    record and showing the user's traceback, as any other error of the user's does."""
    source = tmp_path / "in.txt"
    source.write_text("a b\nc boom d\n")
    output = tmp_path / "out"
    with pytest.raises(JobFailed) as failure:
        run_job(client, "odd_exceptions", [source], output, job_class=job_class)
    status = failure.value.status
    assert status["error"].startswith(reason.format(source=source)), status["error"]
    if job_class != "HoldsItself":  # (the engine found what is wrong with the output: no frame of the user's)
        assert "odd_exceptions.py" in status["traceback"] and "hop/tasks.py" not in status["traceback"], status
    report = json.loads((output / "_job.json").read_text())
    failed = [attempt for attempt in report["attempts"] if attempt["status"] == "failed"]
    assert len(failed) == 1, failed  # (not retried: the user's code fails on that record every time)


def test_skip_bad_records_skips_a_record_whose_map_raised_no_exception(client: Client, tmp_path: Path) -> None:
    """A map raising ``asyncio.CancelledError`` (no ``Exception``) on a record is skipped by ``--skip-bad-records``
    as any other error of the map's: its process died, retried, and the job failed."""
    source = tmp_path / "in.txt"
    source.write_text("a b\nc boom d\n")
    output = tmp_path / "out"
    run_job(client, "odd_exceptions", [source], output, job_class="CancelledInMap", options={"skip_bad_records": 1})
    assert output_dict(output) == {"a": 1, "b": 1}
    listing = (output / "_bad_records").iterdir()
    (listed,) = [json.loads(line) for path in listing for line in path.read_text().splitlines()]
    assert (listed["offset"], listed["record"]) == (4, "c boom d") and "CancelledError" in listed["error"], listed


def test_a_huge_error_message_is_cut(client: Client, tmp_path: Path) -> None:
    """A map raising an error with a 5,000,000-character message put it in the job's error and traceback whole:
    printed twice on stderr, and twice in ``_job.json``. Both show its start and its length."""
    source = tmp_path / "in.txt"
    source.write_text("a b\nc boom d\n")
    output = tmp_path / "out"
    with pytest.raises(JobFailed) as failure:
        run_job(client, "odd_exceptions", [source], output, job_class="HugeMessage")
    status = failure.value.status
    assert "raised ValueError: cannot parse xxx" in status["error"], status["error"][:300]
    assert "... (5,000,013 characters)" in status["error"], status["error"][-300:]
    assert len(status["error"]) < 5_000 and len(status["traceback"]) < 5_000
    assert "ValueError: cannot parse xxx" in status["traceback"] and "characters)" in status["traceback"]
    assert (output / "_job.json").stat().st_size < 50_000


def test_bad_input_gets_clear_errors(client: Client, tmp_path: Path) -> None:
    long_line = tmp_path / "long.txt"
    long_line.write_bytes(b"short\n" + b"x" * 12_000_000 + b"\nafter\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "wordcount", [long_line], tmp_path / "out1", options={"max_line_bytes": 5_000_000})
    assert f"{long_line}: the line at byte offset 6 is longer than 5,000,000 bytes" in failure.value.status["error"]
    # Within the limit the same 12 MB line is an ordinary record.
    run_job(client, "wordcount", [long_line], tmp_path / "out2", options={"max_line_bytes": 50_000_000})
    assert output_dict(tmp_path / "out2") == {"short": 1, "x" * 12_000_000: 1, "after": 1}
    undecodable = tmp_path / "latin1.txt"
    undecodable.write_bytes("ok\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(JobFailed) as failure:
        run_job(client, "wordcount", [undecodable], tmp_path / "out3")
    assert f"{undecodable}: line at byte offset 3 is not valid UTF-8" in failure.value.status["error"]
    assert not (tmp_path / "out3" / "_SUCCESS").exists()


def test_pageviews_job_on_generated_hourly_files(client: Client, tmp_path: Path) -> None:
    from hop.gen.pageviews import generate_pageviews

    folder = tmp_path / "pagecounts"
    generate_pageviews(folder, days=1, pages=2000, seed=3)
    expected: collections.Counter[tuple[str, int]] = collections.Counter()
    for path in sorted(folder.glob("pagecounts-*.gz")):
        hour = int(path.name.split("-")[2][:2])
        with gzip.open(path, "rt", encoding="utf-8") as file:
            for line in file:
                lang, _, views, _ = line.split(" ")
                expected[(lang, hour)] += int(views)
    report = run_job(client, "pageviews", [str(folder)], tmp_path / "out", num_reduces=2)
    assert report["num_maps"] <= 2  # 24 small gzip files share maps (each is read whole by one)
    assert output_dict(tmp_path / "out") == dict(expected)
    assert report["counters"]["user"] == {}, "no malformed lines in generated data"


def test_grep_job_counts_matching_lines(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "log.txt"
    source.write_text("ok start\nerror: disk\nok\nerror: disk\nfatal error here\n")
    report = run_job(client, "grep", [source], tmp_path / "out")
    assert output_dict(tmp_path / "out") == {"error: disk": 2, "fatal error here": 1}
    assert report["counters"]["user"] == {"grep": {"matching_lines": 3}}


def test_reducer_external_merge_without_combiner(client: Client, zipf_text: Path, tmp_path: Path) -> None:
    report = run_job(
        client,
        "wordcount_nocombine",
        [zipf_text],
        tmp_path / "out",
        num_reduces=2,
        split_size=1 << 20,
        spill_records=100_000,
        reduce_memory=200_000,
    )
    assert output_dict(tmp_path / "out") == word_counts(zipf_text)
    assert report["counters"]["reduce_disk_bytes_peak"] > 0, "runs should have gone to disk past the memory limit"


def test_skip_bad_records_in_reduce(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("good bad1 good bad2 fine\n")
    output = tmp_path / "out"
    report = run_job(client, "failing_reduce", [source], output, options={"skip_bad_records": 2})
    assert output_dict(output) == {"good": 2, "fine": 1}
    assert report["counters"]["bad_records_skipped"] == 2
    lines = [json.loads(line) for line in (output / "_bad_records" / "reduce-00000.jsonl").read_text().splitlines()]
    assert [b["key"] for b in lines] == ["'bad1'", "'bad2'"] and "refusing bad1" in lines[0]["error"]
    with pytest.raises(JobFailed) as failure:
        run_job(client, "failing_reduce", [source], tmp_path / "out2", options={"skip_bad_records": 1})
    status = failure.value.status
    assert status["error"].startswith("reduce task 0: 2 bad keys in one reduce task, more than --skip-bad-records 1")
    assert "key 'bad1': ValueError: refusing bad1; key 'bad2': ValueError: refusing bad2" in status["error"]
    assert "refusing bad2" in status["traceback"] and "hop/tasks.py" not in status["traceback"]


def test_a_failed_job_leaves_no_part_files(client: Client, tmp_path: Path) -> None:
    """The reducers that finished had their parts committed; once the job fails they go (a reader of OUT/part-*
    must not take a failed job's partial output), and _job.json says why."""
    source = tmp_path / "in.txt"
    source.write_text(" ".join(f"word{i}" for i in range(200)) + " bad1\n")
    output = tmp_path / "out"
    with pytest.raises(JobFailed) as failure:
        run_job(client, "late_failing_reduce", [source], output, num_reduces=4)
    assert "reduce at key 'bad1'" in failure.value.status["error"]
    assert sorted(p.name for p in output.iterdir()) == ["_job.json"]
    assert json.loads((output / "_job.json").read_text())["status"] == "failed"


def test_unreadable_inputs_are_clear_errors() -> None:
    import multiprocessing
    import os
    import shutil
    import tempfile

    from hop.inputs import InputError, expand_inputs

    base = Path(tempfile.mkdtemp(prefix="hop-perm-"))  # world-traversable, unlike pytest's tmp_path
    base.chmod(0o755)
    locked = base / "locked"
    locked.mkdir()
    (locked / "a.txt").write_text("x\n")
    hidden = locked / "a.txt"
    locked.chmod(0)

    def attempt(paths: list[str]) -> str:
        try:
            expand_inputs(paths)
        except InputError as error:
            return str(error)
        return "no error"

    def as_nobody(connection: object, paths: list[str]) -> None:
        os.setgid(65534)
        os.setuid(65534)  # root reads anything: check what an ordinary user sees
        connection.send(attempt(paths))  # type: ignore[attr-defined]

    try:
        results = []
        for paths in ([str(locked)], [str(hidden)]):
            if os.geteuid() == 0:
                context = multiprocessing.get_context("fork")
                receiver, sender = context.Pipe(duplex=False)
                child = context.Process(target=as_nobody, args=(sender, paths))
                child.start()
                assert receiver.poll(30), "the unprivileged check did not answer"
                results.append(receiver.recv())
                child.join(timeout=10)
            else:
                results.append(attempt(paths))
    finally:
        locked.chmod(0o755)
        shutil.rmtree(base)
    assert results[0] == (
        f"input directory {locked}: cannot list it (Permission denied); check the permissions of it and its parent "
        "directories"
    )
    assert results[1].startswith(f"input {hidden}: cannot access it (Permission denied)")


def test_failed_jobs_give_their_slots_back(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("boom\n" + "fine\n" * 10)
    for attempt in range(6):  # more failed jobs than the cluster has slots
        with pytest.raises(JobFailed):
            run_job(client, "failing_map", [source], tmp_path / f"failed{attempt}", num_reduces=4)
    report = run_job(client, "wordcount", [source], tmp_path / "ok", num_reduces=4)
    assert report["status"] == "succeeded"


def test_a_map_of_a_gzip_file_reports_how_far_it_has_read(tmp_path: Path) -> None:
    """A map reading a compressed file reported 0.5 from its start to its end (its records' offsets are in the text,
    not the file): a job of a few large .gz logs showed its maps half done throughout. A gzip file's trailer gives
    its text's length, so the offset says how far the map is; a file whose text's length is not known (bz2, or a
    gzip trailer smaller than the file) still says 0.5."""
    from hop.inputs import Split
    from hop.tasks import _fraction

    text = "".join(f"line {n} of some log text\n" for n in range(20_000)).encode()
    (tmp_path / "log.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "log.txt.bz2").write_bytes(bz2.compress(text))
    whole_gz, whole_bz2 = Split(str(tmp_path / "log.txt.gz"), 0, -1), Split(str(tmp_path / "log.txt.bz2"), 0, -1)
    assert [_fraction(whole_gz, offset) for offset in (0, len(text) // 4, len(text) - 10)] == pytest.approx(
        [0.0, 0.25, 0.99], abs=0.001
    )
    assert _fraction(whole_bz2, len(text) // 4) == 0.5
    assert _fraction(Split(str(tmp_path / "plain.txt"), 1000, 4000), 2000) == 0.25


def test_a_map_of_a_jobs_output_read_back_reports_how_far_it_has_read(tmp_path: Path) -> None:
    """A map reading a hop job's output (``--input-format output``) took its record's key for a byte offset: with
    int keys its progress said 100% from the start (or anything), with others 50% throughout. It now says where its
    reader is in the file."""
    import threading

    folder = tmp_path / "counts"
    folder.mkdir()
    lines = "".join(f"{1_000_000_000 + n}\t{json.dumps('a b c')}\n" for n in range(4_000))
    (folder / "part-00000").write_text(lines, encoding="utf-8")
    spec = build_spec(load_job_file(job_path("slow_map")), [str(folder)], str(tmp_path / "out"), input_format="output")
    seen: list[float] = []
    with LocalCluster(workers=1) as cluster:
        client, watcher = Client(cluster.address), Client(cluster.address)
        try:
            run = threading.Thread(target=run_steps, args=(client, spec), kwargs={"progress": False, "timeout": 60})
            run.start()
            while run.is_alive():
                run.join(0.05)
                seen += [job["map_fraction"] for job in watcher.jobs() if job["maps_done"] == 0]
            run.join(60)
        finally:
            client.close()
            watcher.close()
    assert output_dict(tmp_path / "out") == {"a": 4_000, "b": 4_000, "c": 4_000}
    assert any(0.05 < fraction < 0.95 for fraction in seen), seen[-20:]
