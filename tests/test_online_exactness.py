"""Differential: online aggregation against what it claims. A job run with snapshots, in random order, or with
``--stop-when-accurate`` that ran to its end writes what a plain run writes; and each snapshot of a job with one map,
whose read position is known (the first ``n`` chunks of the seeded order, ``n`` as its ``_snapshot.json`` says per
partition), holds exactly the value so far, the documented estimate (Sum, Count: ``B * S / b`` by bytes; Mean:
``S_y / S_x``), ``final`` and fractions computed here from those chunks, and no key those chunks do not hold."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from hop.inputs import expand_inputs
from hop.loader import load_job_file
from hop.planning import plan_map_inputs
from hop.runner import online_options
from tests.conftest import job_path, read_output, run_job

CHUNK = 64 << 10
ONE_MAP = 16 << 20
"""A split size over the whole input: one map, reading the chunks in the seeded order."""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two files of ``key value`` lines (about 11 chunks): 30 common keys, 6 rare ones, values -100..1000."""
    folder = tmp_path_factory.mktemp("keyed")
    rng = random.Random(8)
    keys = [f"k{i:02d}" for i in range(30)] + [f"rare{i}" for i in range(6)]
    for name, lines in (("a.txt", 50_000), ("b.txt", 8_000)):
        text = "".join(f"{rng.choices(keys, [40] * 30 + [1] * 6)[0]} {rng.randint(-100, 1000)}\n" for _ in range(lines))
        (folder / name).write_text(text)
    return folder


def chunk_values(inputs: Path, seed: int) -> list[tuple[int, dict[str, list[int]]]]:
    """Per chunk of the single map's seeded order: its size and the values of each key of the lines starting in
    its byte range (the lines it reads)."""
    (task,) = plan_map_inputs(
        expand_inputs([str(inputs)]), ONE_MAP, chunked=True, chunk_size=CHUNK, order="random", seed=seed
    )
    chunks = []
    for chunk in task:
        data = Path(chunk.split.path).read_bytes()
        values: dict[str, list[int]] = {}
        position = 0
        for line in data.split(b"\n"):
            if chunk.split.start <= position < chunk.split.start + chunk.split.length and line:
                key, value = line.decode().split()
                values.setdefault(key, []).append(int(value))
            position += len(line) + 1
        chunks.append((chunk.size, values))
    return chunks


def documented(aggregate: str, values: list[int], seen_bytes: int, all_bytes: int) -> tuple[Any, Any]:
    """(value so far, estimate) of one group as docs/online.md defines them."""
    if aggregate == "Sum":
        return sum(values), all_bytes * sum(values) / seen_bytes
    if aggregate == "Count":
        return len(values), all_bytes * len(values) / seen_bytes
    if aggregate == "Mean":
        return sum(values) / len(values), sum(values) / len(values)
    return max(values), max(values)


@pytest.mark.parametrize("aggregate", ["Sum", "Count", "Mean", "Max"])
def test_each_snapshot_of_one_map_is_the_documented_estimate_of_the_chunks_it_read(
    client: Client, inputs: Path, tmp_path: Path, aggregate: str
) -> None:
    job = f"{aggregate}Values"
    options = online_options(
        load_job_file(job_path("keyed_values"), job),
        [str(inputs)],
        snapshot_every=0.1,
        order="random",
        seed=3,
        chunk_size=CHUNK,
    )
    report = run_job(
        client, "keyed_values", [inputs], tmp_path / "online", job, num_reduces=2, split_size=ONE_MAP, options=options
    )
    assert report["num_maps"] == 1
    run_job(client, "keyed_values", [inputs], tmp_path / "plain", job, num_reduces=2)
    final = dict((key, value) for key, value in read_output(tmp_path / "plain"))
    assert read_output(tmp_path / "online") == read_output(tmp_path / "plain")
    chunks = chunk_values(inputs, seed=3)
    all_bytes = sum(size for size, _ in chunks)
    part_way = 0
    for folder in (tmp_path / "online" / "_snapshots").iterdir():
        info = json.loads((folder / "_snapshot.json").read_text())
        shown = dict(read_output(folder))
        for partition in info["partitions"]:
            read = partition["strata_seen"][""]
            part_way += 0 < read < len(chunks)
            seen_bytes = sum(size for size, _ in chunks[:read])
            assert partition["chunks_fraction"] == pytest.approx(read / len(chunks))
            assert partition["input_fraction"] == pytest.approx(seen_bytes / all_bytes)
            rows = [
                json.loads(line)
                for line in (folder / f"estimates-{partition['index']:05d}.jsonl").read_text().splitlines()
            ]
            assert len(rows) == partition["groups"]
            for row in rows:
                values = [v for _, by_key in chunks[:read] for v in by_key.get(row["key"], [])]
                assert values, f"{folder.name}: {row['key']} is in none of the {read} chunks read"
                so_far, estimate = documented(aggregate, values, seen_bytes, all_bytes)
                assert row["value"] == pytest.approx(so_far, rel=1e-12)
                assert row["final"] == (read == len(chunks))
                if aggregate == "Max":  # no estimate: the value so far, shown as it is
                    estimate = so_far
                    assert row["estimate"] in (None, so_far) and (row["low"] is None or row["final"])
                else:
                    assert row["estimate"] == pytest.approx(estimate, rel=1e-12)
                    assert row["low"] is None or row["low"] <= row["estimate"] <= row["high"]
                assert shown[row["key"]] == pytest.approx(estimate, rel=1e-12)
                if row["final"]:
                    assert shown[row["key"]] == final[row["key"]] and type(shown[row["key"]]) is type(final[row["key"]])
    assert part_way, "some snapshot was taken part-way through the input"


RANDOM_SNAPSHOTS = {"snapshot_every": 0.2, "order": "random", "seed": 1}
FILE_ORDER_SNAPSHOTS = {"snapshot_every": 0.3}
NEVER_ACCURATE = {"order": "random", "seed": 2, "stop_when_accurate": 1e-9}


@pytest.mark.parametrize(
    ("job", "online"),
    [
        *(
            (job, online)
            for job in ("SumValues", "MedianValues", "TotalsByDigit")
            for online in (RANDOM_SNAPSHOTS, FILE_ORDER_SNAPSHOTS)
        ),
        ("SumValues", NEVER_ACCURATE),  # (needs a Sum, Count or Mean step)
        ("TotalsByDigit", {**NEVER_ACCURATE, "mode": "blocking"}),  # (a pipeline stops early only with --blocking)
    ],
)
def test_an_online_runs_output_is_a_plain_runs(
    client: Client, inputs: Path, tmp_path: Path, job: str, online: dict[str, Any]
) -> None:
    online = dict(online)
    settings = {"num_reduces": 3, "split_size": 200_000, "mode": online.pop("mode", "pipelined")}
    options = online_options(load_job_file(job_path("keyed_values"), job), [str(inputs)], chunk_size=CHUNK, **online)
    report = run_job(client, "keyed_values", [inputs], tmp_path / "online", job, options=options, **settings)
    run_job(client, "keyed_values", [inputs], tmp_path / "plain", job, **settings)
    assert report["status"] == "succeeded" and not report.get("approximate")
    assert read_output(tmp_path / "online") == read_output(tmp_path / "plain")
    assert any((tmp_path / "online" / "_snapshots").iterdir())


def test_a_restarted_reducers_snapshots_hold_the_maps_committed_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reducer 0's first attempt dies at its first snapshot request, once maps committed; its retry gets their runs
    anew and is asked that snapshot again. It answered at once, with the runs come by then: snapshots of 3 chunks
    where 6 maps of a chunk each had committed, or of nothing (``groups`` 0) after one that held half the input. Now
    each of its answers holds at least the chunks of the maps committed before it started."""
    from hop.local_cluster import LocalCluster

    monkeypatch.setenv("HOP_FAULT", "reduce:snapshot:0")
    # 40 chunks, more runs than the workers may have in flight to one reducer (hop.shuffle's credits): a retry that
    # answers before the committed maps' runs are all back cannot hold them all.
    folder = tmp_path / "in"
    folder.mkdir()
    rng = random.Random(9)
    (folder / "big.txt").write_text(
        "".join(f"k{rng.randrange(30):02d} {rng.randint(0, 1000)}\n" for _ in range(330_000))
    )
    inputs = folder
    options = online_options(
        load_job_file(job_path("keyed_values"), "SumValues"),
        [str(inputs)],
        snapshot_every=0.3,
        order="random",
        seed=4,
        chunk_size=CHUNK,
    )
    with LocalCluster(workers=2, map_slots=1, reduce_slots=2) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            run_job(
                client,
                "keyed_values",
                [inputs],
                tmp_path / "out",
                "SumValues",
                num_reduces=1,
                split_size=64_000,
                options=options,
            )
        finally:
            client.close()
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    reduces = sorted((a["attempt"], a["start"]) for a in report["attempts"] if a["kind"] == "reduce")
    assert len(reduces) == 2, reduces
    retry_start = reduces[1][1]
    tasks = plan_map_inputs(
        expand_inputs([str(inputs)]), 64_000, chunked=True, chunk_size=CHUNK, order="random", seed=4, slots=2
    )
    assert report["num_maps"] == len(tasks)
    chunks = sum(len(task) for task in tasks)
    committed = [
        int(a["task_id"][-5:])
        for a in report["attempts"]
        if a["kind"] == "map" and a["status"] == "succeeded" and a["end"] < retry_start
    ]
    assert committed, "maps committed before the reducer's retry started"
    before = sum(len(tasks[index]) for index in committed) / chunks
    for folder in (tmp_path / "out" / "_snapshots").iterdir():
        (partition,) = json.loads((folder / "_snapshot.json").read_text())["partitions"]
        assert partition["chunks_fraction"] >= before, (folder.name, partition, before)
