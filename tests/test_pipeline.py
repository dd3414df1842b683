"""Job-to-job pipelining on real processes: reduce output streamed into the next job's maps."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from hop.coordinator import Coordinator
from hop.gen.text import generate_text
from hop.jobspec import JobSpec
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import (
    JobFailed,
    build_spec,
    earlier_reports,
    online_options,
    run_pipeline,
    run_staged_jobs,
    run_steps,
)
from hop.wording import share
from tests.conftest import ROOT, hop, job_path, output_dict, relay, run_job

TIMEOUT = 180


def specs(source: Path, output: Path, *jobs: str, **settings: Any) -> list[JobSpec]:
    return [build_spec(load_job_file(job_path(job)), [str(source)], str(output), **settings) for job in jobs]


def expected_top(source: Path, k: int = 20) -> list[list[Any]]:
    counts = collections.Counter(source.read_text(encoding="utf-8").split())
    return [[count, word] for count, word in sorted(((c, w) for w, c in counts.items()), reverse=True)[:k]]


def test_wordcount_then_topk_streams_and_is_exact(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 600_000, seed=31, vocabulary=5000)
    jobs = specs(source, tmp_path / "out", "slow_map", "topk", num_reduces=2, split_size=200_000)
    # A cluster of its own with a spare map slot beyond the word count's 3 maps: a top-k map takes it as soon as no
    # word-count map waits for a slot or may be split for it (maps this small never are) and listens on the pipe from
    # the start. (Downstream maps once started only when every upstream map had committed; the word count's reduce
    # ends ~0.1 s after that, and on a loaded machine every top-k map started after it and read files only.) The word
    # count's maps take about 1.5 s each (``slow_map``): maps of 1 MB ended in 0.2 s, before a top-k map had started
    # (1 run in 6).
    with LocalCluster(workers=2, map_slots=2, reduce_slots=2) as cluster:
        client = Client(cluster.address)
        try:
            report = run_pipeline(client, jobs, progress=False, timeout=TIMEOUT, keep_intermediate=True)
        finally:
            client.close()
    assert output_dict(tmp_path / "out") == {"top": expected_top(source)}
    assert report["pipelined"] and len(report["steps"]) == 1
    streamed = report["counters"].get("pipe_streamed_bytes", 0)
    assert streamed > 0, "the downstream maps read the upstream reduce output from the pipe"
    # --keep-intermediate: the word counts are kept, and equal a staged run's.
    counts = output_dict(tmp_path / "out" / "_steps" / "step-1")
    assert counts == dict(collections.Counter(source.read_text(encoding="utf-8").split()))
    # Every byte reached the next job once: streamed, or read from the committed file by a downstream map that
    # started after its partition committed (on a loaded machine that can happen: the pipeline degrades to staged).
    staged = report["counters"].get("pipe_file_bytes", 0)
    written = sum(len(p.read_bytes()) for p in (tmp_path / "out" / "_steps" / "step-1").glob("part-*"))
    assert written == streamed + staged
    assert not list(tmp_path.glob(".out.steps-*")), "the scratch directory is gone"


def test_a_step_reading_a_pipe_shows_its_maps_progress(tmp_path: Path) -> None:
    """The top-k maps read the word counts through a pipe, whose size is unknown while it is written: their
    progress stayed 0% until they committed. Polled while the (slow) top-k map runs, it is between 0 and 1, the
    same in the job's status (the progress bar), the web view's job list and its task list."""
    source = tmp_path / "in.txt"
    generate_text(source, 400_000, seed=35, vocabulary=20000)  # ~10,500 words: the map reports every 4,096
    jobs = specs(source, tmp_path / "out", "wordcount", "slow_topk", num_reduces=1)
    seen: list[tuple[float, float, float]] = []
    with LocalCluster(workers=1) as cluster:
        client, watcher = Client(cluster.address), Client(cluster.address)
        try:
            run = threading.Thread(target=run_pipeline, args=(client, jobs), kwargs={"progress": False})
            run.start()
            while run.is_alive():
                run.join(0.05)
                for job in watcher.jobs():
                    if job["step"] == 0 and job["name"] == "SlowTopWords" and job["maps_done"] == 0:
                        status = watcher.status(job["job_id"])
                        (task,) = [t for t in watcher.job(job["job_id"])["tasks"] if t["kind"] == "map"]
                        seen.append((status["map_fraction"], job["map_fraction"], task["fraction"]))
            run.join(TIMEOUT)
        finally:
            client.close()
            watcher.close()
    assert output_dict(tmp_path / "out") == {"top": expected_top(source)}
    moving = [fractions for fractions in seen if 0 < fractions[0] < 1]
    assert moving, f"the top-k map's progress moved before it committed: {seen[-5:]}"
    # (each poll asks three times: the map may report between them)
    assert all(max(f) - min(f) < 0.5 for f in moving)


def test_a_reduce_waiting_for_a_slow_downstream_map_gives_its_slot_to_a_waiting_reduce(tmp_path: Path) -> None:
    """One reduce slot, two word-count reduces, a top-k whose maps are slower than the reduce streaming to them:
    reduce 0, its output whole, waited (up to a minute) for top-k map 0 to take the end of its stream before it
    committed, so reduce 1 could not start before that map was done and the run took the two maps' time one after
    the other. A task waiting for its slot now makes it commit at once (map 0 reads on from the committed file):
    reduce 1 starts while map 0 still works through its partition, and the result is exact."""
    source = tmp_path / "in.txt"
    generate_text(source, 400_000, seed=35, vocabulary=20000)
    jobs = specs(source, tmp_path / "out", "wordcount", "slow_topk", num_reduces=2)
    with LocalCluster(workers=1, map_slots=2, reduce_slots=1) as cluster:
        client = Client(cluster.address)
        try:
            report = run_pipeline(client, jobs, progress=False, timeout=TIMEOUT)
        finally:
            client.close()
    assert output_dict(tmp_path / "out") == {"top": expected_top(source)}

    def attempt(report: dict[str, Any], task_id: str) -> dict[str, Any]:
        (found,) = [a for a in report["attempts"] if a["task_id"] == task_id and a["status"] == "succeeded"]
        return found

    reduce_1_start = attempt(report["steps"][0], "reduce-00001")["start"]
    map_0_end = attempt(report, "map-00000")["end"]
    assert reduce_1_start < map_0_end - 0.5, "reduce 1 ran while top-k map 0 (0.2 ms a record) was still at work"


@pytest.mark.parametrize("run", [run_steps, run_pipeline, run_staged_jobs])
def test_a_ctrl_c_as_the_scratch_is_made_leaves_no_folder(
    client: Client, tmp_path: Path, run: Any, ctrl_c_as_scratch_is_made: None
) -> None:
    """A run keeps its steps' outputs in ``.OUT.steps-*`` (``.OUT.jobs-*`` for ``--blocking`` jobs) beside OUT: a
    Ctrl-C that came as that folder was made, before the run's ``try`` removing it began, left it behind. The Ctrl-C
    still interrupts the run, before any job is submitted, and the folder goes."""
    source = tmp_path / "in.txt"
    source.write_text("a b a\n", encoding="utf-8")
    jobs = specs(source, tmp_path / "out", "two_steps", "topk")
    submitted = len(client.jobs())
    with pytest.raises(KeyboardInterrupt):
        run(client, jobs[0] if run is run_steps else jobs, progress=False, timeout=TIMEOUT)
    assert not list(tmp_path.glob(".out.*")), "the scratch directory is gone"
    assert len(client.jobs()) == submitted


def test_multi_step_job_pipelined_equals_staged(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 1_500_000, seed=32, vocabulary=3000)
    (staged_spec,) = specs(source, tmp_path / "staged", "two_steps", num_reduces=2, split_size=1 << 19)
    run_steps(client, staged_spec, progress=False, timeout=TIMEOUT)
    (spec,) = specs(source, tmp_path / "piped", "two_steps", num_reduces=2, split_size=1 << 19)
    report = run_pipeline(client, [spec], progress=False, timeout=TIMEOUT)
    assert [p.read_bytes() for p in sorted((tmp_path / "piped").glob("part-*"))] == [
        p.read_bytes() for p in sorted((tmp_path / "staged").glob("part-*"))
    ]
    words = report["steps"][0]["counters"]["reduce_output_records"]
    lines = report["steps"][0]["counters"]["map_input_records"]
    expected = {"steps": {"lines": lines, "words": words}}
    assert report["counters"]["user"] == expected, "counters of the piped step count once, summed over the steps"
    assert json.loads((tmp_path / "piped" / "_job.json").read_text())["counters"]["user"] == expected
    assert not (tmp_path / "piped" / "_steps").exists()


@pytest.mark.parametrize(
    ("run", "words", "online"),
    [
        pytest.param(run, words, online, id=f"{mode}-{name}-{kind}")
        for run, mode in ((run_steps, "blocking"), (run_pipeline, "pipelined"))
        for words, name in ((0, "empty"), (1200, "one-partition-empty"))
        for online, kind in ((False, "batch"), (True, "online"))
        # (an online --blocking step's maps are dealt its sample's chunks, not a map per part, but for an empty input)
        if not (online and words and run is run_steps)
    ],
)
def test_a_later_steps_maps_run_their_hooks_once_per_partition_in_either_mode(
    client: Client, tmp_path: Path, run: Callable[..., dict[str, Any]], words: int, online: bool
) -> None:
    """With ``--blocking`` a later step's maps were planned as any input's: an empty output of the step before made
    no map, so its ``mapper_init``/``mapper_final`` never ran, and small parts shared one map, where a pipelined run
    has a map per partition of the step before and runs them once each: the same job gave another output by mode.
    Either mode now runs a map per partition (per part file), an empty one too, as Hadoop gives an empty file a
    split. (Online, a ``--blocking`` later step's maps are its sample's chunks: but for an empty output.)"""
    source = tmp_path / "in.txt"
    source.write_text("a b c\na b\n" + "frequent " * words + "\n")
    settings: dict[str, Any] = {}
    if online:
        job_class = load_job_file(job_path("hooked_second_step"))
        settings["options"] = online_options(job_class, [str(source)], snapshot_every=0.5, order="random", seed=1)
    (spec,) = specs(source, tmp_path / "out", "hooked_second_step", num_reduces=2, **settings)
    report = run(client, spec if run is run_steps else [spec], progress=False, timeout=TIMEOUT)
    expected = {"maps": 2, "read": 1, "words": 1} if words else {"maps": 2, "read": 0}
    assert output_dict(tmp_path / "out") == expected
    assert report["num_maps"] == 2


@pytest.mark.parametrize("run", [run_staged_jobs, run_pipeline], ids=["blocking", "pipelined"])
def test_a_job_after_another_has_a_map_per_partition_of_its_output_in_either_mode(
    client: Client, tmp_path: Path, run: Callable[..., dict[str, Any]]
) -> None:
    """A list of job files run ``--blocking``: the later job's maps read the job before's part files as any input,
    two small parts in one map (its ``mapper_final`` ran once), where a pipelined run has a map per partition."""
    source = tmp_path / "in.txt"
    source.write_text("a b c\na b\n")
    jobs = specs(source, tmp_path / "out", "hooked_second_step", "hooked_after_a_job", num_reduces=2)
    report = run(client, jobs, progress=False, timeout=TIMEOUT)
    assert output_dict(tmp_path / "out") == {"maps": 2, "read": 2, "records": 2}
    assert report["num_maps"] == 2


def test_a_job_with_map_hooks_run_on_a_saved_output_gives_what_it_gives_in_the_pipeline(tmp_path: Path) -> None:
    """A job whose ``mapper_final`` says what its map read, run on a saved word count's folder of two small parts
    (``--input-format output``), had one map for both, where run after the word count in a pipeline (or
    ``--blocking``) it has a map per partition: the same jobs gave another output run one after the other. A job
    with map hooks reading part files now has a map per part file, an empty one too. (What the pipeline gives:
    test_a_job_after_another_has_a_map_per_partition_of_its_output_in_either_mode.)"""
    for name, text in (("words", "a b c\na b\n"), ("empty", "")):
        (tmp_path / f"{name}.txt").write_text(text)
        common = ("--workers", "1", "--reducers", "2", "--quiet")
        counted = hop("run", str(ROOT / "jobs" / "wordcount.py"), f"{name}.txt", "-o", f"{name}-counts", *common,
                      cwd=tmp_path)  # fmt: skip
        assert counted.returncode == 0, counted.stderr
        apart = (f"{name}-counts", "-o", f"{name}-apart", "--input-format", "output", *common)
        ran = hop("run", job_path("hooked_after_a_job"), *apart, cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        expected = {"maps": 2, "read": 3, "records": 3} if name == "words" else {"maps": 2, "read": 0}
        assert output_dict(tmp_path / f"{name}-apart") == expected, name


@pytest.mark.parametrize("run", [run_staged_jobs, run_pipeline], ids=["blocking", "pipelined"])
def test_a_later_steps_map_knows_the_part_file_it_reads(
    client: Client, tmp_path: Path, run: Callable[..., dict[str, Any]]
) -> None:
    """``self.input_file`` in a later step's map was None pipelined, where ``--blocking`` (and the job run on the
    saved output) named the part file it reads: a job taking a name from it failed pipelined alone. It names the
    part file of the step before that the pipe streams."""
    source = tmp_path / "in.txt"
    source.write_text("a b c\na b\n")
    jobs = specs(source, tmp_path / "out", "wordcount", "input_files", num_reduces=2)
    run(client, jobs, progress=False, timeout=TIMEOUT)
    counts = {"part-00000": 0, "part-00001": 0}
    counts.update(output_dict(tmp_path / "out"))
    assert sorted(counts) == ["part-00000", "part-00001"] and sum(counts.values()) == 3, counts


def test_a_later_steps_snapshot_map_knows_the_part_file_it_reads(client: Client, tmp_path: Path) -> None:
    """A later step's snapshots, recomputed from the step before's by its map, called it with ``self.input_file``
    None: each failed as the job ran ("TypeError: expected str, ..., not NoneType" in every ``_snapshot.json``).
    The map gets the part file of the step before's snapshot it reads."""
    source = tmp_path / "in.txt"
    generate_text(source, 400_000, seed=36, vocabulary=300)
    jobs = specs(source, tmp_path / "out", "slow_sum_wordcount", "input_files", num_reduces=2, split_size=1 << 19)
    first_class = load_job_file(job_path("slow_sum_wordcount"))
    options = online_options(first_class, [str(source)], snapshot_every=0.5, order="random", chunk_size=64 << 10)
    jobs = [dataclasses.replace(spec, options={**spec.options, **options}) for spec in jobs]
    run_pipeline(client, jobs, progress=False, timeout=TIMEOUT)
    derived = sorted((tmp_path / "out" / "_snapshots").iterdir())
    assert derived, "the later step published snapshots recomputed from the word count's"
    for folder in derived:
        info = json.loads((folder / "_snapshot.json").read_text())
        assert not [p["error"] for p in info["partitions"] if p.get("error")], folder.name
        assert set(output_dict(folder)) <= {"part-00000", "part-00001"} and output_dict(folder), folder.name


def test_keep_intermediate_keeps_the_same_steps_staged_as_pipelined(client: Client, tmp_path: Path) -> None:
    """--keep-intermediate with --blocking (staged jobs, each job's steps staged) keeps what a pipeline keeps: every
    step's output but the last, numbered over all the jobs' steps."""
    source = tmp_path / "in.txt"
    generate_text(source, 300_000, seed=34, vocabulary=2000)
    kept = {}
    for name, run in (("piped", run_pipeline), ("staged", run_staged_jobs)):
        jobs = specs(source, tmp_path / name, "two_steps", "topk", num_reduces=2)
        report = run(client, jobs, keep_intermediate=True, progress=False, timeout=TIMEOUT)
        assert len(report["steps" if run is run_pipeline else "jobs"]) == (2 if run is run_pipeline else 1)
        # The run's user counters: two_steps's, both of its steps (topk counts none), however the jobs ran.
        words = earlier_reports(report)[0]["counters"]["reduce_output_records"]
        expected = {"steps": {"lines": source.read_text().count("\n"), "words": words}}
        assert json.loads((tmp_path / name / "_job.json").read_text())["counters"]["user"] == expected, name
        steps = tmp_path / name / "_steps"
        kept[name] = {p.name: output_dict(p) for p in sorted(steps.iterdir())}
        assert not list(tmp_path.glob(f".{name}.*")), "the scratch directories are gone"
    assert sorted(kept["staged"]) == ["step-1", "step-2"] and kept["staged"] == kept["piped"]
    (single,) = specs(source, tmp_path / "single", "two_steps", num_reduces=2)
    run_steps(client, single, keep_intermediate=True, progress=False, timeout=TIMEOUT)
    assert output_dict(tmp_path / "single" / "_steps" / "step-1") == kept["piped"]["step-1"]


def test_a_failed_step_keeps_the_intermediate_outputs_it_read(client: Client, tmp_path: Path) -> None:
    """--keep-intermediate on a run that fails: the earlier steps' outputs are kept in OUT/_steps as on success,
    and the error names the kept file (it named a scratch file deleted with the run, and nothing was kept). Without
    it, the error says the file it names is gone. Either way OUT/_job.json tells of the failed step and the steps
    before it (with staged steps, only the last step's report was written: a failure before it left none)."""
    source = tmp_path / "in.txt"
    source.write_text("a b c a b a\nd d d e\n")
    for keep in (True, False):
        output = tmp_path / f"keep-{keep}"
        (spec,) = specs(source, output, "two_steps_failing", num_reduces=1)
        with pytest.raises(JobFailed) as failed:
            run_steps(client, spec, keep_intermediate=keep, progress=False, timeout=TIMEOUT)
        report = json.loads((output / "_job.json").read_text())
        assert report["status"] == "failed" and report["step"] == 1 and len(report["steps"]) == 1
        assert report["counters"]["user"] == {"steps": {"lines": 2}}, "the run's counters so far: step 1's"
        assert str(failed.value) == report["error"] and "counted 3 times" in report["error"]
        kept = output / "_steps" / "step-1" / "part-00000"
        if keep:
            assert f"map at {kept} " in str(failed.value)
            assert output_dict(output / "_steps" / "step-1") == {"a": 3, "b": 2, "c": 1, "d": 3, "e": 1}
        else:
            assert str(failed.value).endswith(
                "(in an intermediate output, deleted when the run ended: --keep-intermediate keeps it)"
            )
            assert not (output / "_steps").exists()
        assert not list(tmp_path.glob(f".keep-{keep}.*")), "the scratch directory is gone"
    # Staged jobs: the word count's output, which the failing job read, is kept too, numbered as on success.
    jobs = specs(source, tmp_path / "staged", "wordcount", "two_steps_failing", num_reduces=1)
    with pytest.raises(JobFailed) as failed:
        run_staged_jobs(client, jobs, keep_intermediate=True, progress=False, timeout=TIMEOUT)
    steps = tmp_path / "staged" / "_steps"
    assert sorted(p.name for p in steps.iterdir()) == ["step-1"]
    assert f"map at {steps / 'step-1' / 'part-00000'} " in str(failed.value)
    report = json.loads((tmp_path / "staged" / "_job.json").read_text())
    assert report["status"] == "failed" and report["jobs"][0]["name"] == "WordCount"
    # The run's user counters so far: those of the job before, both of its steps, and those of the failing job's
    # first step, which counted two_steps's 3 records and committed before its second step failed.
    jobs = specs(source, tmp_path / "staged-counted", "two_steps", "counted_then_failing", num_reduces=1)
    with pytest.raises(JobFailed) as failed:
        run_staged_jobs(client, jobs, progress=False, timeout=TIMEOUT)
    assert "in the second step" in str(failed.value)
    report = json.loads((tmp_path / "staged-counted" / "_job.json").read_text())
    assert report["status"] == "failed" and report["step"] == 1
    assert report["steps"][0]["counters"]["user"] == {"steps": {"records": 3}}
    assert report["counters"]["user"] == {"steps": {"lines": 2, "words": 5, "records": 3}}


GATED_COUNTS = """
import os, time
from pathlib import Path
from hop import Job


class GatedCounts(Job):
    def map(self, key, value):
        yield key, value

    def reducer_init(self):
        gate = Path(os.environ["HOP_TEST_GATE"])
        (gate / "entered").touch()
        deadline = time.monotonic() + 30
        while not (gate / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return ()

    def reduce(self, key, values):
        yield key, sum(values)
"""


def test_the_listing_of_a_running_run_marks_the_earlier_outputs_it_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hop status`` of a run of several jobs (``--blocking``) listed its first job's first step's output, in a
    scratch folder the run had deleted once that job ended, as the step's output while the run went on. An earlier
    step's output the run deleted is marked ``output_deleted`` (``output_kept``: where ``--keep-intermediate`` kept
    it); one still there is not."""
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("HOP_TEST_GATE", str(gate))
    (tmp_path / "gated.py").write_text(GATED_COUNTS)
    (tmp_path / "in.txt").write_text("a b a\nc a\n")

    def jobs(output: Path) -> list[JobSpec]:
        first = build_spec(load_job_file(job_path("two_steps")), [str(tmp_path / "in.txt")], str(output))
        return [first, build_spec(load_job_file(str(tmp_path / "gated.py")), [], str(output), num_reduces=1)]

    def marks(listing: list[dict[str, Any]], output: Path) -> list[tuple[str, str, bool, str | None]]:
        """(output's last name, state, output_deleted, output_kept) of the run's jobs, in the order submitted."""
        ours = [
            job
            for job in listing
            if job["output"].startswith(str(output.parent / f".{output.name}.")) or job["output"] == str(output)
        ]
        return [(Path(job["output"]).name, job["state"], job["output_deleted"], job["output_kept"]) for job in ours]

    output, kept = tmp_path / "out", tmp_path / "kept"
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client, watcher = Client(cluster.address, timeout=30), Client(cluster.address, timeout=30)
        outcome: dict[str, Any] = {}
        run = threading.Thread(
            target=lambda: outcome.update(report=run_staged_jobs(client, jobs(output), progress=False, timeout=60))
        )
        run.start()
        try:
            deadline = time.monotonic() + 30
            while not (gate / "entered").exists() and run.is_alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert (gate / "entered").exists(), outcome
            running = marks(watcher.jobs(), output)
        finally:
            (gate / "go").touch()
            run.join(timeout=60)
        assert "report" in outcome, outcome
        ended = marks(watcher.jobs(), output)
        run_staged_jobs(client, jobs(kept), keep_intermediate=True, progress=False, timeout=60)
        kept_marks = marks(watcher.jobs(), kept)
        watcher.close()
        client.close()
    # While the last job runs, the first job's scratch folder (its steps') is gone, the second step's output is not.
    assert running == [
        ("step-1", "succeeded", True, None),
        ("step-2", "succeeded", False, None),
        ("out", "running", False, None),
    ]
    assert ended == [
        ("step-1", "succeeded", True, None),
        ("step-2", "succeeded", True, None),
        ("out", "succeeded", False, None),
    ]
    steps = kept / "_steps"
    assert kept_marks == [
        ("step-1", "succeeded", True, str(steps / "step-1")),
        ("step-2", "succeeded", True, str(steps / "step-2")),
        ("kept", "succeeded", False, None),
    ]


@pytest.mark.parametrize("run", [run_steps, run_staged_jobs])
def test_overwrite_clears_the_output_once_a_run_of_several_steps_is_accepted(
    client: Client, tmp_path: Path, run: Callable[..., dict[str, Any]]
) -> None:
    """The output of a run whose steps run in turn is cleared (``--overwrite``) as its first step, writing a scratch
    folder, is accepted, not before the submit (a job the coordinator refused cost the old output) nor once the
    last step writes it: a first step that fails leaves its report there alone, not beside the old output's parts."""
    source, output = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("a b\n")
    (tmp_path / "fails_first.py").write_text(
        "from hop import Job, Step\n\n\nclass FailsFirst(Job):\n    def boom(self, offset, line):\n"
        "        raise ValueError('boom')\n        yield line, 1\n\n    def count(self, key, values):\n"
        "        yield key, sum(values)\n\n    def steps(self):\n"
        "        return [Step(mapper=self.boom, reducer=self.count), Step(mapper=self.count, reducer=self.count)]\n"
    )
    output.mkdir()
    (output / "part-00000").write_text("old\n")
    failing = build_spec(load_job_file(str(tmp_path / "fails_first.py")), [str(source)], str(output), overwrite=True)
    jobs = [failing] if run is run_steps else [failing, *specs(source, output, "wordcount", overwrite=True)]
    with pytest.raises(JobFailed, match="boom"):
        run(client, jobs[0] if run is run_steps else jobs, progress=False, timeout=TIMEOUT)
    assert sorted(path.name for path in output.iterdir()) == ["_job.json"]
    assert json.loads((output / "_job.json").read_text())["status"] == "failed"


def test_pipeline_with_too_few_slots_still_finishes(tmp_path: Path) -> None:
    """One worker with one map and one reduce slot: the steps cannot run side by side, so it degrades to staged."""
    source = tmp_path / "in.txt"
    generate_text(source, 1_000_000, seed=33, vocabulary=2000)
    jobs = specs(source, tmp_path / "out", "wordcount", "topk", num_reduces=2, split_size=1 << 19)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address)
        try:
            run_pipeline(client, jobs, progress=False, timeout=TIMEOUT)
        finally:
            client.close()
    assert output_dict(tmp_path / "out") == {"top": expected_top(source)}


def test_a_later_steps_map_retried_after_a_checkpoint_maps_each_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later step's map reads the step before's output through a pipe. Killed after a checkpoint, its retry kept
    the failed attempt's spills and mapped the whole partition again: the records those spills covered were counted
    twice (every count of counts doubled). A map reading a pipe now takes no checkpoint: its retry starts over."""
    source = tmp_path / "in.txt"
    generate_text(source, 300_000, seed=36, vocabulary=3000)
    # Map 0 of each step, its first attempt: killed after its first checkpoint, or at its end if it takes none.
    monkeypatch.setenv("HOP_FAULT", "map:checkpointed:0,map:done:0")
    result = hop(
        "run", job_path("two_steps"), str(source), "-o", str(tmp_path / "out"), "--workers", "2", "--reducers", "1",
        "--spill-records", "100", "--quiet", timeout=TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    counts = collections.Counter(source.read_text(encoding="utf-8").split())
    assert output_dict(tmp_path / "out") == dict(collections.Counter(counts.values()))
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    killed = [a for a in report["attempts"] if a["task_id"] == "map-00000" and a["attempt"] == 0]
    assert killed and killed[0]["status"] == "failed", "the later step's map should have been killed"


def test_a_retried_reduce_does_not_stream_to_the_reader_restarted_with_its_failed_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The word count's reduce killed before its merge restarts the top-k map reading it, and the reduce's retry is
    assigned in the same turn, before the new map attempt says where it listens. The retry was pointed at the dead
    map attempt's address (its ``pipe_to``), and the new attempt's ``pipe_at`` was lost on it while it waited for
    its slot on the worker where the failed attempt had just died: it streamed to no one and waited a minute for
    acknowledgements before it committed (a run of 2 s took 62 s)."""
    source = tmp_path / "in.txt"
    generate_text(source, 600_000, seed=37, vocabulary=3000)
    monkeypatch.setenv("HOP_FAULT", "reduce:received:0")  # reduce 0's first attempt, in each step
    result = hop(
        "run", job_path("wordcount"), job_path("topk"), str(source), "-o", str(tmp_path / "out"), "--workers", "2",
        "--reducers", "1", "--split-size", "128KB", "--quiet", timeout=TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert output_dict(tmp_path / "out") == {"top": expected_top(source)}
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    retries = [a for a in report["steps"][0]["attempts"] if a["task_id"] == "reduce-00000" and a["attempt"] == 1]
    assert retries, "the word count's reduce should have been killed and retried"
    assert retries[0]["end"] - retries[0]["start"] < 20, "the retry waited for a reader that was gone"


def test_cli_job_list_pipeline(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 800_000, seed=35, vocabulary=1000)
    result = subprocess.run(
        [sys.executable, "-m", "hop", "run", str(ROOT / "jobs" / "wordcount.py"), str(ROOT / "jobs" / "topk.py")]
        + [str(source), "-o", str(tmp_path / "out"), "--workers", "2", "--quiet"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert output_dict(tmp_path / "out") == {"top": expected_top(source)}
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["pipelined"] and report["steps"][0]["name"] == "WordCount"
    blocking = subprocess.run(
        [sys.executable, "-m", "hop", "run", str(ROOT / "jobs" / "wordcount.py"), str(ROOT / "jobs" / "topk.py")]
        + [str(source), "-o", str(tmp_path / "staged"), "--workers", "2", "--quiet", "--blocking"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert blocking.returncode == 0, blocking.stderr
    assert output_dict(tmp_path / "staged") == {"top": expected_top(source)}


def test_a_jobs_output_folder_is_the_input_of_a_later_run(tmp_path: Path) -> None:
    """``input_format = "output"`` (topk.py) reads a saved word count's part files as (key, count) pairs, as the
    pipeline's later step does; it read them as text lines, each line one bogus pair, without a word."""
    source = tmp_path / "in.txt"
    generate_text(source, 300_000, seed=36, vocabulary=800)
    wordcount, topk = str(ROOT / "jobs" / "wordcount.py"), str(ROOT / "jobs" / "topk.py")
    counted = hop("run", wordcount, str(source), "-o", "counts", "--workers", "2", "--quiet", cwd=tmp_path)
    assert counted.returncode == 0, counted.stderr
    top = hop("run", topk, "counts", "-o", "top", "--workers", "1", "--quiet", cwd=tmp_path)
    assert top.returncode == 0, top.stderr
    assert output_dict(tmp_path / "top") == {"top": expected_top(source)}
    # Anything else is refused, naming the file, the line and what the format reads.
    text = hop("run", topk, str(source), "-o", "bad", "--workers", "1", "--quiet", cwd=tmp_path)
    assert text.returncode == 1 and f"input file {source}: line at byte offset 0 has no TAB" in text.stderr
    assert "input format 'output' reads the part files a hop job wrote" in text.stderr, text.stderr
    # A continuous job's records are lines or messages, never part files.
    args = ("--source", f"replay:{source}", "--window", "10r", "-o", "stream")
    stream = hop("run", topk, *args, cwd=tmp_path)
    assert stream.returncode == 2 and "input format 'output' reads the part files of a batch job" in stream.stderr


def test_job_class_picks_the_job_of_a_later_job_file_defining_several(tmp_path: Path) -> None:
    """``--job-class`` named the first job file's class alone: a later job file defining two jobs was refused,
    told to "pick one with --job-class", and picking one failed the first file, which defines no class of that
    name. It now picks the class of that name in each job file that defines one; the others run their own job."""
    (tmp_path / "in.txt").write_text("a b a\nc a\n")
    (tmp_path / "later.py").write_text(
        "from hop import Job\n\n\nclass Keys(Job):\n    def map(self, key, value):\n        yield key, 1\n\n\n"
        "class Values(Job):\n    def map(self, key, value):\n        yield value, 1\n\n"
        "    def reduce(self, key, values):\n        yield key, sum(values)\n"
    )
    wordcount = str(ROOT / "jobs" / "wordcount.py")
    for mode in ([], ["--blocking"]):
        out = f"out{len(mode)}"
        ran = hop("run", wordcount, "later.py", "in.txt", "-o", out, "--workers", "1", "--quiet", "--job-class",
                  "Values", *mode, cwd=tmp_path)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert output_dict(tmp_path / out) == {1: 2, 3: 1}  # (how many words have each count: b and c once, a 3 times)
    ambiguous = hop("run", wordcount, "later.py", "in.txt", "-o", "none", "--workers", "1", cwd=tmp_path)
    assert ambiguous.returncode == 2 and "job file later.py must define exactly one" in ambiguous.stderr
    assert "in a pipeline it picks the class of that name in each job file that defines one" in ambiguous.stderr
    unknown = hop("run", wordcount, wordcount, "in.txt", "-o", "none", "--job-class", "Other", cwd=tmp_path)
    assert unknown.returncode == 2, unknown.stderr
    assert f"no job file defines a hop.Job subclass Other (--job-class): {wordcount} runs WordCount" in unknown.stderr


def test_the_summary_of_a_pipeline_counts_the_whole_run(tmp_path: Path) -> None:
    """``hop run``'s last line gave the last step's input records (and with --blocking its time alone: 0.40 s of a
    5 s run) and said nothing of an earlier step stopped early by --stop-when-accurate, on whose estimates the
    result is built."""
    source = tmp_path / "in.txt"
    generate_text(source, 3_000_000, seed=36, vocabulary=50)
    lines = len(source.read_text(encoding="utf-8").splitlines())
    pair = [str(ROOT / "jobs" / "wordcount.py"), str(ROOT / "jobs" / "topk.py"), str(source), "--workers", "2"]
    for extra in ([], ["--blocking"]):
        result = subprocess.run(
            [sys.executable, "-m", "hop", "run", *pair, "-o", str(tmp_path / "out"), "--overwrite", *extra],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert result.returncode == 0, result.stderr
        summary = result.stderr.strip().splitlines()[-1]
        assert f": {lines:,} input records, 1 output record in " in summary, summary
        report = json.loads((tmp_path / "out" / "_job.json").read_text())
        earlier = report.get("steps") or report.get("jobs")
        seconds = float(summary.split(" succeeded in ")[1].split("s:")[0])
        assert seconds >= report["end"] - earlier[0]["start"] - 0.01, summary
    # A step stops early only while some of its maps have not committed (Coordinator._snapshot_answered): the word
    # count's maps here take a few seconds (0.2 ms a line), while the plain one's were done before a busy machine
    # answered a snapshot.
    online = ["--order", "random", "--chunk-size", "64KB", "--split-size", "256KB", "--stop-when-accurate", "0.5"]
    slow = [job_path("slow_sum_wordcount"), *pair[1:]]
    result = subprocess.run(
        [sys.executable, "-m", "hop", "run", *slow, "-o", str(tmp_path / "early"), "--blocking", *online],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "early" / "_job.json").read_text())
    stopped = report["jobs"][0]["approximate"]
    # The run's own report says its result is approximate, and which step made it so (not only under jobs[0]).
    assert report["approximate"] == {
        **stopped,
        "step": 1,
        "job_id": report["jobs"][0]["job_id"],
        "steps_stopped_early": [1],
    }
    summary = result.stderr.strip().splitlines()[-1]
    assert (
        f"; step 1 stopped early after {share(stopped['input_fraction'], 1)} of its input, so the result is " in summary
    )
    # Its intervals, the only measure of that accuracy, are kept in OUT where the report says (they went with the
    # step's output in the scratch folder, and "intervals" named OUT/_snapshots/LABEL, which held none).
    assert stopped["intervals"] == f"_steps/step-1/_snapshots/{stopped['snapshot']}/estimates-*.jsonl"
    assert len(list((tmp_path / "early").glob(stopped["intervals"]))) == 2, list((tmp_path / "early").rglob("*"))
    assert f"intervals in {tmp_path / 'early' / stopped['intervals']})" in summary, summary


def test_the_snapshot_an_earlier_step_of_a_job_stopped_early_on_is_kept(tmp_path: Path) -> None:
    """A job of two steps run with --blocking whose first step stopped early: the run's report named its intervals
    in OUT/_snapshots/LABEL, where none were (the step's snapshots went with its output in the scratch folder)."""
    source = tmp_path / "in.txt"
    generate_text(source, 3_000_000, seed=36, vocabulary=50)
    online = ["--order", "random", "--chunk-size", "64KB", "--split-size", "256KB", "--stop-when-accurate", "0.5"]
    result = subprocess.run(
        [sys.executable, "-m", "hop", "run", job_path("slow_sum_two_steps"), str(source), "-o", str(tmp_path / "out")]
        + ["--workers", "2", "--blocking", *online],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    stopped = report["approximate"]
    assert stopped["step"] == 1 and stopped == {**report["steps"][0]["approximate"], **stopped}
    assert stopped["intervals"] == f"_steps/step-1/_snapshots/{stopped['snapshot']}/estimates-*.jsonl"
    parts = sorted((tmp_path / "out").glob(stopped["intervals"]))
    intervals = [json.loads(line) for part in parts for line in part.read_text(encoding="utf-8").splitlines()]
    assert len(intervals) == stopped["rows"] and all(row["low"] is not None for row in intervals)
    assert f"intervals in {tmp_path / 'out' / stopped['intervals']})" in result.stderr.strip().splitlines()[-1]


def test_a_step_stopped_early_is_told_once_in_a_run_of_several_jobs(tmp_path: Path) -> None:
    """``hop run A.py B.py --blocking`` where A has two steps and its first stopped early: A's report (its last step's)
    notes that stop with ``approximate`` plus ``step``, which the run counted as a stop of step 2 as well
    ("steps_stopped_early": [1, 2], and "step 2 stopped early after ..." in the summary)."""
    from hop.cli import _summary
    from hop.runner import _note_earlier_stop

    def report(number: int, **fields: Any) -> dict[str, Any]:
        counters = {"map_input_records": 10, "reduce_output_records": 1}
        return {"job_id": f"job-{number}", "start": 0.0, "end": 1.0, "counters": counters, **fields}

    own = {"snapshot": "0.150", "input_fraction": 0.15, "stop_when_accurate": 0.5, "max_relative_half_width": 0.2}
    own["intervals"] = "_steps/step-1/_snapshots/0.150/estimates-*.jsonl"
    first_job = report(2, steps=[report(1, approximate=own)])
    _note_earlier_stop(first_job)  # as run_steps does for the first job, of two steps
    assert first_job["approximate"]["step"] == 1
    final = report(3, jobs=[first_job])
    _note_earlier_stop(final)  # as run_staged_jobs does for the run
    assert final["approximate"] == {**own, "step": 1, "job_id": "job-1", "steps_stopped_early": [1]}
    summary = _summary(final, str(tmp_path))
    assert "step 1 stopped early after 15.0% of its input" in summary and "step 2" not in summary, summary
    # The same job after a job of one step (``A.py B.py``): its report numbers its steps over the run too, where it
    # said step 1 for the run's step 2.
    second_job = report(2, steps=[report(1, approximate=own)])
    _note_earlier_stop(second_job, 1)  # as run_steps does for a job after one step
    assert second_job["approximate"]["step"] == 2 and second_job["approximate"]["steps_stopped_early"] == [2]


def test_a_failing_later_step_fails_the_pipeline_at_once(tmp_path: Path) -> None:
    """The word count's reducers waited a minute for the failed second job's maps to take their output (and the
    word count was then recorded as succeeded): the failure now fails the step before too, at once, and the user
    sees the second job's error and traceback."""
    import time

    source = tmp_path / "in.txt"
    generate_text(source, 3_000_000, seed=36, vocabulary=5000)
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "hop", "run", str(ROOT / "jobs" / "wordcount.py"), job_path("failing_topk")]
        + [str(source), "-o", str(tmp_path / "out"), "--workers", "2", "--quiet"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 1 and "RuntimeError: refusing m" in result.stderr, result.stderr
    assert 'raise RuntimeError(f"refusing {word}")' in result.stderr, "the user's traceback"
    assert time.monotonic() - began < 20


def test_each_steps_report_and_status_number_it_over_the_run(client: Client, tmp_path: Path) -> None:
    """A step's report and ``hop status`` gave its place among its own job's ``steps()`` alone (``"step": 0,
    "num_steps": 1`` for every job file of a pipeline of one-step jobs), and a failed later step's report,
    ``OUT/_job.json``, reading a pipe, had no inputs either (``[]``): nothing said which step of the run it was, or
    what the run read. Each now gives ``run_step``/``run_steps``, numbered from 1 over the run as its messages
    number the steps (``step 2/3``), pipelined and ``--blocking``; a job run alone gives none. The failed run's
    report gives the run's inputs."""
    source = tmp_path / "in.txt"
    source.write_text("apple mango zebra apple\nmango kiwi\n" * 20)
    for mode, run in (("pipelined", run_pipeline), ("blocking", run_staged_jobs)):
        jobs = specs(source, tmp_path / mode, "two_steps", "topk", num_reduces=1, mode=mode)
        report = run(client, jobs, progress=False, timeout=TIMEOUT)
        steps = [*earlier_reports(report), report]
        assert [(step["run_step"], step["run_steps"]) for step in steps] == [(1, 3), (2, 3), (3, 3)], mode
        assert [step["step"] for step in steps] == [0, 1, 0], "their place among their job's steps() stays"
        listed = {job["job_id"]: job for job in client.jobs()}
        assert [listed[step["job_id"]]["run_step"] for step in steps] == [1, 2, 3], mode
        assert client.status(report["job_id"])["run_step"] == 3
    # The step before still runs as the later one fails (4 ms a key, 300 keys): it is ended with it, unfinished.
    generate_text(source, 30_000, seed=36, vocabulary=300)
    jobs = specs(source, tmp_path / "failed", "slow_reduce", "failing_topk", num_reduces=1)
    with pytest.raises(JobFailed):
        run_pipeline(client, jobs, progress=False, timeout=TIMEOUT)
    failed = json.loads((tmp_path / "failed" / "_job.json").read_text())
    assert "steps" not in failed, "no step finished before the failed one"
    assert failed["name"] == "FailingTopK" and (failed["run_step"], failed["run_steps"]) == (2, 2), failed
    assert failed["inputs"] == [str(source)], "the run's inputs, as its report has them when it succeeds"
    alone = run_job(client, "wordcount", [source], tmp_path / "alone")
    assert "run_step" not in alone and "run_step" not in client.status(alone["job_id"])


def test_a_pipeline_past_its_timeout_names_the_later_steps_still_running(client: Client, tmp_path: Path) -> None:
    """A word count streaming into a slow later step cannot end before that step takes its output: past
    ``--timeout`` the run said "job ... (step 1/2) still running after 1.5s", as if the word count were the slow
    step, and no word of the step it waited on. It names the later steps, which run too."""
    source = tmp_path / "in.txt"
    source.write_text("".join(f"w{number}\n" for number in range(20_000)))  # 10 s of the first step's map
    # A slow first step: with a quick word count, the pipe may let it commit before the later step took its output
    # (released rather than wait), and the step running at the timeout was then the later one, under a loaded run.
    jobs = specs(source, tmp_path / "out", "slow_map", "slow_topk", num_reduces=1)
    with pytest.raises(TimeoutError) as timed_out:
        run_pipeline(client, jobs, progress=False, timeout=1.5)
    first, later = client.submitted[-2:]
    assert f"job {first} (step 1/2) still running after 1.5s" in str(timed_out.value)
    assert str(timed_out.value).endswith(f", as are the steps after it, which it streams into: step 2/2 ({later})")


def test_hop_stop_of_a_step_names_the_steps_of_its_pipeline_it_ended(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """``hop stop`` of one step of a running pipeline ends the steps streaming into it and those it streams into,
    and said only "hop: JOB is cancelled": the word count, stopped, also ended the step reading it, unsaid. It
    names them."""
    source = tmp_path / "in.txt"
    source.write_text("".join(f"w{number}\n" for number in range(20_000)))  # 4 s of the later step's map
    jobs = specs(source, tmp_path / "out", "wordcount", "slow_topk", num_reduces=1)
    failures: list[BaseException] = []

    def run() -> None:
        own = Client(cluster.address, timeout=30)  # (a client is not shared between threads)
        try:
            run_pipeline(own, jobs, progress=False, timeout=TIMEOUT)
        except BaseException as error:  # (the JobFailed the stop causes, asserted below)
            failures.append(error)
        finally:
            own.close()

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    while len(running := [job for job in client.jobs() if job["state"] == "running"]) < 2:
        assert time.monotonic() < deadline and runner.is_alive(), "the pipeline's two steps run"
        time.sleep(0.05)
    first, later = running[-2]["job_id"], running[-1]["job_id"]
    stopped = hop("stop", first, "--coordinator", cluster.address)
    runner.join(TIMEOUT)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == f"hop: {first} is cancelled, and with it the other steps of its pipeline: {later}"
    assert len(failures) == 1 and isinstance(failures[0], JobFailed), failures
    alone = run_job(client, "wordcount", [source], tmp_path / "alone")
    again = hop("stop", alone["job_id"], "--coordinator", cluster.address)
    assert "had already ended" in again.stdout, again.stdout


def test_a_failed_middle_job_is_the_step_the_pipeline_reports(client: Client, tmp_path: Path) -> None:
    """A pipeline of three jobs whose second fails in its map: the failure fails the first, still streaming to it,
    and the run waited on the first, so OUT/_job.json reported the word count as the failed step, its error "downstream
    job job-...-0002 failed: ...", naming a job the run never showed. It reports the job that failed, with its error
    and traceback, as a staged run does."""
    source = tmp_path / "in.txt"
    source.write_text("apple mango zebra apple\nmango kiwi\n" * 50)
    jobs = specs(source, tmp_path / "out", "slow_first_key", "failing_topk", "topk", num_reduces=1)
    with pytest.raises(JobFailed) as failed:
        run_pipeline(client, jobs, progress=False, timeout=TIMEOUT)
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["status"] == "failed" and report["name"] == "FailingTopK", (report["name"], report["error"])
    assert "map at pipe:" in report["error"], "it read the first job's output from the pipe"
    assert "refusing mango" in report["error"] and "downstream job" not in report["error"], report["error"]
    assert str(failed.value) == report["error"]
    assert 'raise RuntimeError(f"refusing {word}")' in (failed.value.status.get("traceback") or "")
    assert all(step["status"] == "succeeded" for step in report.get("steps", [])), "only finished steps are listed"


def test_a_later_steps_output_the_shuffle_cannot_encode_names_the_record_it_read(tmp_path: Path) -> None:
    """A later step's map reads the step before's output from a pipe, which cannot be read again as a file is: a set
    in its output failed with the clear message but no record (batch maps map their input again to find it); it
    now names the record, found among those the pipe can give again (its latest blocks, or the committed file)."""
    (tmp_path / "in.txt").write_text("a b c\nb c d\n")
    (tmp_path / "sets.py").write_text(
        "from hop import Job, Step\n\n\nclass Sets(Job):\n"
        "    def count(self, offset, line):\n        for word in line.split():\n            yield word, 1\n\n"
        "    def total(self, word, counts):\n        yield word, sum(counts)\n\n"
        "    def invert(self, word, count):\n        yield count, {word} if word == 'c' else word\n\n"
        "    def gather(self, count, words):\n        yield count, len(list(words))\n\n"
        "    def steps(self):\n        return [Step(mapper=self.count, reducer=self.total), "
        "Step(mapper=self.invert, reducer=self.gather)]\n"
    )
    result = hop("run", "sets.py", "in.txt", "-o", "out", "--workers", "2", "--reducers", "1", "--quiet", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert (
        "/part-00000 record with key 'c': 2 raised UnencodableRecordError: map output value {'c'} (type set) of "
        "key 2 cannot be encoded by the shuffle: yield a list or tuple instead of a set"
    ) in result.stderr, result.stderr


def test_snapshots_flow_down_the_pipeline(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 2_000_000, seed=36, vocabulary=300)
    jobs = specs(source, tmp_path / "out", "slow_sum_wordcount", "topk", num_reduces=2, split_size=1 << 19)
    first_class = load_job_file(job_path("slow_sum_wordcount"))
    options = online_options(
        first_class, [str(source)], snapshot_every=0.25, order="random", seed=4, chunk_size=64 << 10
    )
    jobs = [dataclasses.replace(spec, options={**spec.options, **options}) for spec in jobs]
    report = run_pipeline(client, jobs, progress=False, timeout=TIMEOUT)
    assert output_dict(tmp_path / "out") == {"top": expected_top(source)}
    derived = sorted((tmp_path / "out" / "_snapshots").iterdir())
    assert derived, "the top-k job published snapshots recomputed from the word count's"
    words = set(source.read_text(encoding="utf-8").split())
    for folder in derived:
        info = json.loads((folder / "_snapshot.json").read_text())
        assert info["upstream"]["label"] == folder.name and info["upstream"]["job_id"] == report["steps"][0]["job_id"]
        assert info["upstream"]["chunks_fraction"] > 0, "the word count had data at every snapshot"
        tops = [v for k, v in output_dict(folder).items() if k == "top"]
        assert len(tops) == 1 and len(tops[0]) == 20 and all(word in words for _, word in tops[0])
    assert [s["label"] for s in client.snapshots(report["job_id"])] == [f.name for f in derived]


def test_a_later_steps_snapshots_run_its_maps_hooks_and_tear_down_what_they_set_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later step's snapshot, recomputed from the first step's, called the step's map on the snapshot's job instance
    without ``mapper_init`` (a map scaling by what it set failed every such snapshot) or ``mapper_final``, and the
    instance it set up was never torn down. Each of the first step's parts now goes through a map task of its own
    (``setup``, ``mapper_init``, the map, ``mapper_final``, ``teardown``), and the snapshot's reduce instance is torn
    down once it wrote its rows."""
    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv("HOOKED_TOTAL_CALLS", str(calls))  # (before the cluster starts: its tasks inherit it)
    source = tmp_path / "in.txt"
    generate_text(source, 2_000_000, seed=36, vocabulary=300)
    jobs = specs(source, tmp_path / "out", "slow_sum_wordcount", "hooked_total", num_reduces=2, split_size=1 << 19)
    options = online_options(
        load_job_file(job_path("slow_sum_wordcount")), [str(source)], snapshot_every=0.25, order="random", seed=4,
        chunk_size=64 << 10,
    )  # fmt: skip
    jobs = [dataclasses.replace(spec, options={**spec.options, **options}) for spec in jobs]
    with LocalCluster(workers=2, map_slots=1, reduce_slots=2) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            report = run_pipeline(client, jobs, progress=False, timeout=TIMEOUT, keep_intermediate=True)
        finally:
            client.close()
    words = len(source.read_text(encoding="utf-8").split())
    assert output_dict(tmp_path / "out") == {"total": 2 * words, "maps": 2}
    derived = sorted((tmp_path / "out" / "_snapshots").iterdir())
    assert derived, "the later step published snapshots recomputed from the first step's"
    for folder in derived:
        info = json.loads((folder / "_snapshot.json").read_text())
        assert [p.get("error") for p in info["partitions"]] == [None, None], info["partitions"]
        counts = output_dict(tmp_path / "out" / "_steps" / "step-1" / "_snapshots" / folder.name)
        got = output_dict(folder)
        assert got["maps"] == 2, "a map per part of the first step's snapshot, each running mapper_final"
        assert got["total"] == pytest.approx(2 * sum(counts.values())), folder.name
    assert report["counters"]["user"] == {}
    set_up = {path.name.split("-", 1)[1] for path in calls.glob("setup-*")}
    torn_down = {path.name.split("-", 1)[1] for path in calls.glob("teardown-*")}
    assert len(set_up) > 2 + 2 + 2 * len(derived), "the tasks' instances and the snapshots' were set up"
    assert set_up == torn_down


def test_snapshots_run_the_reduces_init_and_final_hooks(tmp_path: Path) -> None:
    """A snapshot called a hand-written reduce on an instance of its own without its ``reducer_init``: a reduce using
    what that hook set (mrjob jobs load a lookup there) failed every snapshot, the first step's and the later one's
    recomputed from it, and ``reducer_final``'s pairs, which the partition's output holds, were in none. A snapshot
    now runs ``reducer_init`` before its reduce calls and ``reducer_final`` after them, on its own instance, their
    pairs among its rows; so the later step's snapshot is the later step over the first step's as its output is
    over that step's output."""
    source = tmp_path / "in.txt"
    generate_text(source, 1_500_000, seed=41, vocabulary=300)
    options = online_options(
        load_job_file(job_path("hooked_reduces")), [str(source)], snapshot_every=0.25, order="random", seed=5,
        chunk_size=64 << 10,
    )  # fmt: skip
    (spec,) = specs(source, tmp_path / "out", "hooked_reduces", num_reduces=2, split_size=1 << 19, options=options)
    with LocalCluster(workers=2, map_slots=1, reduce_slots=2) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            run_pipeline(client, [spec], progress=False, timeout=TIMEOUT, keep_intermediate=True)
        finally:
            client.close()
    counts = collections.Counter(source.read_text(encoding="utf-8").split())
    assert output_dict(tmp_path / "out") == {"total": 2 * sum(counts.values()), "groups": 2 * len(counts)}
    first = sorted((tmp_path / "out" / "_steps" / "step-1" / "_snapshots").iterdir())
    derived = sorted((tmp_path / "out" / "_snapshots").iterdir())
    assert [f.name for f in first] == [f.name for f in derived] and derived, "snapshots were taken and flowed down"
    for earlier, later in zip(first, derived, strict=True):
        for folder in (earlier, later):
            info = json.loads((folder / "_snapshot.json").read_text())
            assert [p.get("error") for p in info["partitions"]] == [None, None], (folder, info["partitions"])
        groups = total = 0
        for part in sorted(earlier.glob("part-*")):
            rows = dict(line.split("\t") for line in part.read_text(encoding="utf-8").splitlines())
            rows = {json.loads(key): json.loads(value) for key, value in rows.items()}
            assert rows.pop("~groups") == len(rows), f"{part}: reducer_final's pair counts the part's groups"
            groups, total = groups + len(rows), total + sum(rows.values())
        assert output_dict(later) == {"total": 2 * total, "groups": 2 * groups}, later.name


def test_hop_snapshot_of_a_later_step_flows_down_from_the_first_step(client: Client, tmp_path: Path) -> None:
    """``hop snapshot`` of a pipeline's later step took a snapshot of its own reducers, labelled by its own count
    (``0.000-now0``), and one of the first step at the same progress flowed down to it under the same label:
    publishing the second failed the pipeline with an internal error. The later step's is now taken by the first
    step and flows down, as the pipeline's other snapshots do; every label is the first step's."""
    source = tmp_path / "in.txt"
    generate_text(source, 2_000_000, seed=38, vocabulary=300)
    first, second = specs(source, tmp_path / "out", "slow_sum_wordcount", "topk", num_reduces=2, split_size=1 << 19)
    options = online_options(
        load_job_file(job_path("slow_sum_wordcount")), [str(source)], snapshot_every=0.25, order="random", seed=4,
        chunk_size=64 << 10,
    )  # fmt: skip
    first = dataclasses.replace(first, output=str(tmp_path / "counts"), options={**options, "pipe_output": True})
    upstream = client.submit(first)
    later = {**options, "upstream": upstream}
    downstream = client.submit(dataclasses.replace(second, inputs=(), input_format="output", options=later))
    # Both at once, before the first step reports any progress: each labelled 0.000-now0 before.
    asked = [client.snapshot_now(downstream)["label"], client.snapshot_now(upstream)["label"]]
    assert len(set(asked)) == 2, asked
    for job_id in (upstream, downstream):
        status = client.wait(job_id, timeout=TIMEOUT)
        assert status["state"] == "succeeded", status.get("error")
    labels = [s["label"] for s in client.snapshots(upstream)]
    later = [s["label"] for s in client.snapshots(downstream)]
    # In the first step's order, whichever completed first (seen under load: now1 before now0 in the later step's
    # list, as they completed: test_snapshots_taken_at_once_flow_down_in_the_first_steps_order).
    assert later == labels and set(asked) <= set(labels), (asked, labels, later)
    for label in labels:
        info = json.loads((tmp_path / "out" / "_snapshots" / label / "_snapshot.json").read_text())
        assert info["upstream"]["job_id"] == upstream and info["upstream"]["label"] == label


def test_snapshots_taken_at_once_flow_down_in_the_first_steps_order(coordinator: Coordinator, tmp_path: Path) -> None:
    """Two snapshots of the first step taken at once (``hop snapshot`` twice) may complete in either order: a reducer
    that starts between the two requests gets the second as broadcast before the first, asked again as it says it
    is ready. Each flowed down as it completed, so the later step listed ``now1`` before ``now0`` where the first
    step lists ``now0`` first. They now flow down in the first step's order, whatever the order they complete in."""
    source = tmp_path / "in.txt"
    source.write_text("a b a\n")
    options = online_options(load_job_file(job_path("wordcount")), [str(source)], snapshot_every=0.5)
    first, second = specs(source, tmp_path / "out", "wordcount", "topk", num_reduces=1, overwrite=True)
    first = dataclasses.replace(first, output=str(tmp_path / "counts"), options={**options, "pipe_output": True})
    coordinator.on_submit(b"client", {"job": first.to_wire()})
    (upstream,) = coordinator.jobs
    later = dataclasses.replace(second, inputs=(), input_format="output", options={**options, "upstream": upstream})
    coordinator.on_submit(b"client", {"job": later.to_wire()})
    (downstream,) = set(coordinator.jobs) - {upstream}
    coordinator._schedule()
    assert coordinator.jobs[upstream].reduces[0].attempts, "the first step's reducer runs on w"
    for _ in range(2):
        coordinator.on_snapshot(b"client", {"job_id": upstream})
    tracker = coordinator.jobs[upstream].snapshots
    assert tracker is not None
    taken = [snapshot.label for snapshot in tracker.snapshots]
    assert len(taken) == 2
    answer = {"type": "snapshot_done", "job_id": upstream, "worker": "w", "index": 0, "attempt": 0}
    for seq in (1, 0):  # the second completes first
        relay(coordinator, {**answer, "seq": seq, "label": taken[seq], "rows": [], "groups": 0})
    assert [snapshot.complete for snapshot in tracker.snapshots] == [True, True]
    later_tracker = coordinator.jobs[downstream].snapshots
    assert later_tracker is not None
    assert [snapshot.label for snapshot in later_tracker.snapshots] == taken
    assert [snapshot.source for snapshot in later_tracker.snapshots] == [
        str(tmp_path / "counts" / "_snapshots" / label) for label in taken
    ]


@pytest.mark.parametrize("mode", [[], ["--blocking"]], ids=["pipelined", "blocking"])
def test_a_failed_step_is_named_as_the_runs_progress_lines_name_it(tmp_path: Path, mode: list[str]) -> None:
    """Two job files of three steps in all, the third failing: the error named no step ("job failed: map at ..."),
    and run --blocking, each job's progress lines numbered its own steps ("step 1/2", "step 2/2", then none for a
    one-step job) where a pipeline, the bad records' listings and the kept outputs number them over the whole run.
    The error now names the failed step so, with its job id, and --blocking numbers its progress lines so."""
    (tmp_path / "in.txt").write_text("a b a\nc a b\n")
    two_steps, failing = job_path("two_steps"), job_path("failing_topk")  # (its map compares a count with "m")
    result = hop("run", two_steps, failing, "in.txt", "-o", "out", "--workers", "2", *mode, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"hop: error: job failed in step 3/3 ({report['job_id']}): map at "), last
    if mode:
        assert f"hop: step 3/3 {report['job_id']} submitted" in result.stderr, result.stderr


def test_the_summary_says_why_each_step_that_could_stop_early_did_not() -> None:
    """--stop-when-accurate on a run of several steps that ran to its end: the summary gave the last step's reason
    alone, and the step that could stop is often an earlier one (a Sum, then a TopK whose reason read "no group was
    read yet"). It gives every step's, named."""
    from hop.cli import _summary

    first = {
        "job_id": "job-1",
        "start": 0.0,
        "end": 1.0,
        "counters": {"map_input_records": 10, "reduce_output_records": 4},
        "stop_held_back": {"snapshot": "0.850", "reason": "the widest interval is 7.0% of its estimate, over 5.0%"},
    }
    last = {**first, "job_id": "job-2", "start": 1.0, "end": 2.0, "steps": [first]}
    del last["stop_held_back"]
    line = _summary(last, "out", 0.05)
    assert (
        "so the job ran to the end and the result is exact; at the last that could have stopped step 1 (0.850): "
        "the widest interval is 7.0% of its estimate, over 5.0%" in line
    ), line
    del first["stop_held_back"]
    last["stop_held_back"] = {"snapshot": "0.950", "reason": "no group was read yet"}
    assert _summary(last, "out", 0.05).endswith(
        "at the last that could have stopped step 2 (0.950): no group was read yet"
    )
    one = {
        **first,
        "stop_held_back": {"snapshot": "0.950", "reason": "4 of the 5 chunks needed of the input were read"},
    }
    assert _summary(one, "out", 0.05).endswith(
        "at the last that could have stopped it (0.950): 4 of the 5 chunks needed of the input were read"
    )


def test_a_step_without_intervals_is_not_given_stop_when_accurate() -> None:
    """A run staged step by step gave --stop-when-accurate to every step, and a step that can never stop early (a
    TopK, Min, Max or hand-written reduce) reported why its snapshots could not stop it, a reason the run's summary
    then gave for the whole run. Only steps whose reduce has intervals get it; every step keeps its snapshots."""
    from hop import Step
    from hop.aggregates import Count, Mean, Sum, TopK
    from hop.runner import _step_options

    options = {"stop_when_accurate": 0.05, "snapshot_every": 0.05, "order": "random"}
    for estimating in (Sum(), Count(), Mean()):
        assert _step_options(options, Step(reducer=estimating)) == options
    for other in (TopK(3), None, lambda self, key, values: iter(())):
        assert _step_options(options, Step(reducer=other)) == {"snapshot_every": 0.05, "order": "random"}
    assert _step_options({"order": "random"}, Step(reducer=TopK(3))) == {"order": "random"}


class _CtrlCInSubmit(Client):
    """A client on which a Ctrl-C comes while its ``at``-th submit request is out (the submit holds it until the
    reply is in, then it acts: ``Client.submit``), as a user's Ctrl-C at that moment would."""

    def __init__(self, address: str, at: int, after_the_others_ended: bool = False) -> None:
        super().__init__(address, timeout=30)
        self.at = at
        self.after_the_others_ended = after_the_others_ended
        self.submits = 0

    def request(self, msg_type: str, /, **fields: Any) -> dict[str, Any]:
        if msg_type == "submit":
            self.submits += 1
            if self.submits == self.at:
                for job_id in self.submitted if self.after_the_others_ended else ():
                    assert self.wait(job_id, timeout=30)["state"] == "succeeded"
                os.kill(os.getpid(), signal.SIGINT)
        return super().request(msg_type, **fields)


@pytest.mark.parametrize(
    "run, names, at",
    [
        (run_steps, ["two_steps"], 1),
        (run_pipeline, ["two_steps", "topk"], 2),
        (run_pipeline, ["two_steps", "topk"], -2),
        (run_staged_jobs, ["two_steps", "topk"], 1),
    ],
    ids=["steps", "pipeline", "pipeline-first-step-ended", "staged-jobs"],
)
def test_a_ctrl_c_during_a_steps_submit_says_why_in_out(
    cluster: LocalCluster, tmp_path: Path, run: Callable[..., dict[str, Any]], names: list[str], at: int
) -> None:
    """A Ctrl-C while a step's submit was out (the first step's of a job run step by step, a later one's of a
    pipeline) acted as the submit returned, before the run knew which step's output to report: the steps were
    cancelled, and OUT got no _job.json (the cancelled step's was in the scratch directory, deleted), though an
    interrupted run's OUT/_job.json says why it ended."""
    source = tmp_path / "in.txt"
    source.write_text("a b a\nc a b\n")
    jobs = specs(source, tmp_path / "out", *names, num_reduces=1)
    # (at < 0: the steps submitted before have ended when the Ctrl-C comes, as they may on a loaded machine; the
    # run reported the first, which succeeded, and OUT got no _job.json)
    client = _CtrlCInSubmit(cluster.address, abs(at), after_the_others_ended=at < 0)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(client, jobs[0] if run is run_steps else jobs, progress=False, timeout=TIMEOUT)
    finally:
        client.close()
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["status"] == "failed" and report["error"].startswith("cancelled"), report
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "out"], "intermediate outputs removed"


@pytest.mark.parametrize("run", [run_steps, run_pipeline, run_staged_jobs])
def test_a_later_steps_skipped_records_name_the_file_kept(
    client: Client, tmp_path: Path, run: Callable[..., dict[str, Any]]
) -> None:
    """A skipped record of a later step names the file it was read from, an earlier step's output: a scratch file
    deleted with the run, or a pipe (``pipe:JOB_ID/part-N``), even where --keep-intermediate kept that output. It
    names the kept file, whose line at the entry's offset is the record."""
    source = tmp_path / "in.txt"
    source.write_text("a b c a b a\nd d d e\n")
    names = ["two_steps_failing"] if run is run_steps else ["two_steps_failing", "topk"]
    jobs = specs(source, tmp_path / "out", *names, num_reduces=2, options={"skip_bad_records": 10})
    run(client, jobs[0] if run is run_steps else jobs, keep_intermediate=True, progress=False, timeout=TIMEOUT)
    listings = (tmp_path / "out" / "_bad_records").iterdir()
    entries = [json.loads(line) for path in listings for line in path.read_text().splitlines()]
    assert sorted(entry["record"] for entry in entries) == ['"a"\t3', '"d"\t3'], entries
    for entry in entries:
        assert Path(entry["file"]).parent.parent == tmp_path / "out" / "_steps", entry["file"]
        with open(entry["file"], "rb") as kept:
            kept.seek(entry["offset"])
            assert kept.readline().decode().rstrip("\n") == entry["record"], entry


def test_a_step_folder_holding_only_a_kept_snapshot_is_no_kept_output(tmp_path: Path) -> None:
    """Without --keep-intermediate, a --blocking run whose earlier step stopped early keeps that step's snapshot in
    ``OUT/_steps/step-N/_snapshots``, and nothing else of the step: the web view took the folder for the step's
    kept output and showed an empty result, not that the output was deleted. Only a folder with the step's report
    is its kept output."""
    from hop.runner import kept_step_output

    output = tmp_path / "out"
    step = output / "_steps" / "step-1"
    (step / "_snapshots" / "0.500").mkdir(parents=True)
    written_at = str(tmp_path / ".out.steps-abc123" / "step-1")  # where the step wrote, in the run's scratch folder
    assert kept_step_output(written_at) is None
    (step / "_job.json").write_text("{}", encoding="utf-8")
    assert kept_step_output(written_at) == step


def test_a_failed_run_of_several_jobs_keeps_the_snapshot_an_earlier_step_stopped_on(tmp_path: Path) -> None:
    """``hop run A.py B.py --blocking`` whose first job stopped a step early and whose second job failed: the
    earlier job's report in ``OUT/_job.json`` named its intervals under ``OUT/_steps``, but the failure deleted them
    with the scratch folder (a successful run moves them there)."""
    source = tmp_path / "in.txt"
    generate_text(source, 3_000_000, seed=36, vocabulary=50)
    (tmp_path / "boom.py").write_text(
        "from hop import Job\n\n\nclass Boom(Job):\n    def map(self, key, value):\n"
        "        raise ValueError('boom')\n        yield key, value\n"
    )
    online = ["--order", "random", "--chunk-size", "64KB", "--split-size", "256KB", "--stop-when-accurate", "0.5"]
    result = subprocess.run(
        [sys.executable, "-m", "hop", "run", job_path("slow_sum_two_steps"), str(tmp_path / "boom.py"), str(source)]
        + ["-o", str(tmp_path / "out"), "--workers", "2", "--blocking", *online],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 1 and "boom" in result.stderr, result.stderr
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    stopped = report["jobs"][0]["approximate"]
    assert stopped["intervals"].startswith("_steps/step-1/_snapshots/"), stopped
    assert list((tmp_path / "out").glob(stopped["intervals"])), list((tmp_path / "out").rglob("*"))


def test_a_later_steps_reducer_started_after_its_maps_answers_its_snapshots_from_the_step_befores(
    tmp_path: Path,
) -> None:
    """A later step's reducer that starts only once every map of its step has committed (here: one reduce slot, so
    it waits for the first step's reducer and its own partitions before it) owes the snapshots recomputed from the
    first step's that came before it started. They were asked only as it said it was ready; it had every run by
    then (none here: the first step's final output is empty) and went on to its final reduce, and the coordinator
    answered them with the partition's final output as it committed: the later step's snapshot labelled 0.500 held
    its final result (no rows) there, not what the first step's 0.500 gives (7 runs of 7 failed so). Each is now
    recomputed from the first step's."""
    from tests.jobs.rare_words import RARE

    words = [f"{'abcdef'[i % 6] * (1 + i % 5)}{i}" for i in range(600)]
    shuffled = [word for word in words for _ in range(RARE)]
    random.Random(5).shuffle(shuffled)
    source = tmp_path / "in.txt"
    source.write_text("".join(" ".join(shuffled[i : i + 4]) + "\n" for i in range(0, len(shuffled), 4)))
    first, second = specs(source, tmp_path / "out", "rare_words", "rare_by_length", split_size=1 << 16)
    options = online_options(
        load_job_file(job_path("rare_words")), [str(source)], snapshot_every=0.25, order="random", seed=3,
        chunk_size=2 << 10,
    )  # fmt: skip
    first = dataclasses.replace(first, output=str(tmp_path / "rare"), options={**options, "pipe_output": True})
    with LocalCluster(workers=1, map_slots=2, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            upstream = client.submit(first)
            later = {**options, "upstream": upstream}
            second = dataclasses.replace(second, inputs=(), input_format="output", num_reduces=3, options=later)
            downstream = client.submit(second)
            for job_id in (upstream, downstream):
                status = client.wait(job_id, timeout=TIMEOUT)
                assert status["state"] == "succeeded", status.get("error")
        finally:
            client.close()
    assert output_dict(tmp_path / "rare") == {} and output_dict(tmp_path / "out") == {}, "every word is in RARE times"
    labels = sorted(folder.name for folder in (tmp_path / "rare" / "_snapshots").iterdir())
    assert labels and labels == sorted(folder.name for folder in (tmp_path / "out" / "_snapshots").iterdir())
    # (A snapshot requested once every map of the first step had committed may hold the whole input: no rows.)
    assert output_dict(tmp_path / "rare" / "_snapshots" / labels[0]), "words read fewer than RARE times so far"
    for label in labels:
        rare = output_dict(tmp_path / "rare" / "_snapshots" / label)
        info = json.loads((tmp_path / "out" / "_snapshots" / label / "_snapshot.json").read_text())
        assert not [p["index"] for p in info["partitions"] if p.get("final")], (label, info["partitions"])
        expected = collections.Counter(len(word) for word in rare)
        assert output_dict(tmp_path / "out" / "_snapshots" / label) == dict(expected), label
