"""Differential: a continuous job's windows, late records and counters equal a serial model of the documented
semantics (``tests/stream_model.py``) over event streams made to trip them: event times out of order, within and
beyond the allowed lateness, stamps on pane edges, blank and bad lines, CRLF and a byte order mark, keys holding
line separators; tumbling and sliding windows of time, records and bytes; several sources and reducers; a file
tailed while it is written, cut anywhere (mid-line too), then stopped. A window that says ``complete`` (or
``stopped``, after every record was read) must hold exactly what the model says."""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec
from hop.stream.options import stream_options
from hop.stream.runner import run_stream
from hop.stream.windows import WindowSpec
from tests.conftest import job_path
from tests.stream_model import good_records, model, read_late, read_output

pytestmark = pytest.mark.slow

T0 = 1_700_000_000.0
WORDS = ["a", "b", "c", "d", "e"]
ODD_TEXTS = ["x\u2028y", "p\x85q", "r\x1cs", "t\u2029"]
"""Texts a ``WholeText`` key holds as they are: ``str.splitlines`` splits at each of these characters."""


def event_stream(rng: random.Random, count: int, disorder: float, back: float, texts: list[str] | None = None) -> bytes:
    """JSON-line events ``{"ts", "text"}`` at about 100 a second from ``T0``: ``disorder`` of them moved back by up to
    ``back`` seconds, a fifth on a half-second (a pane edge), some with no words; with blank and bad lines
    between them, CRLF line ends and a byte order mark."""
    out, now = ["\ufeff"], T0
    for _ in range(count):
        now += rng.expovariate(100.0)
        stamp = math.floor(now * 2) / 2 if rng.random() < 0.2 else round(now, 3) + 0.0004
        if rng.random() < disorder:
            stamp -= rng.uniform(0, back)
        text = rng.choice(texts) if texts else "" if rng.random() < 0.05 else " ".join(rng.choices(WORDS, k=3))
        out.append(json.dumps({"ts": stamp, "text": text}, ensure_ascii=False) + rng.choice(["\n"] * 9 + ["\r\n"]))
        if rng.random() < 0.02:
            out.append(rng.choice(["{not json\n", "\n", '{"text": "a"}\n', '{"ts": "x", "text": "a"}\n']))
    return "".join(out).encode("utf-8")


CASES = {
    "time-sliding-lateness-3-sources": dict(job="WordSumDifferential", window="2s", slide="500ms", lateness=1.0,
                                            sources=3, reducers=2, disorder=0.2, back=3.0),
    "time-tumbling-late-generic-reduce": dict(job="WordStamps", window="1s", slide=None, lateness=0.0, sources=1,
                                              reducers=3, disorder=0.1, back=2.0),
    "time-slide-not-dividing-max": dict(job="LatestPerWord", window="3s", slide="2s", lateness=0.5, sources=2,
                                        reducers=1, disorder=0.3, back=1.0),
    "records-sliding": dict(job="WordSum", window="10r", slide="4r", lateness=0.0, sources=2, reducers=2,
                            disorder=0.3, back=5.0),
    "bytes-tumbling-line-separators": dict(job="WholeText", window="500b", slide=None, lateness=0.0, sources=1,
                                           reducers=2, disorder=0.0, back=0.0, texts=ODD_TEXTS),
}  # fmt: skip


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with LocalCluster(workers=2, map_slots=3, reduce_slots=3) as cluster:
        connection = Client(cluster.address, timeout=30)
        yield connection
        connection.close()


def check(output: Path, sources: list[bytes], case: dict[str, Any], report: dict[str, Any]) -> None:
    """The job's output against the model: every window, the late records of each map, the counters."""
    spec = WindowSpec.parse(case["window"], case["slide"])
    want = model(sources, case["job"], spec.unit, spec.size, spec.slide, case["lateness"])
    got, metas = read_output(output)
    assert {meta["reason"] for meta in metas.values()} <= {"complete", "stopped"}
    assert got == want.windows
    assert all(meta["output_records"] == len(got[start]["rows"]) for start, meta in metas.items())
    assert read_late(output, len(sources)) == want.late
    counters = report["counters"]
    assert counters["late_records"] == sum(map(len, want.late))
    assert counters["bad_records_skipped"] == sum(want.bad)
    assert counters["map_input_records"] == sum(len(good_records(data)[0]) for data in sources) - sum(
        map(len, want.late)
    )
    assert report["continuous"]["windows_written"] == len(metas)


def spec_of(case: dict[str, Any], sources: list[str], output: Path) -> Any:
    options = stream_options(sources, case["window"], case["slide"], lateness=case["lateness"],
                             checkpoint_windows=2, checkpoint_seconds=0.5)  # fmt: skip
    job = load_job_file(job_path("stream_exact"), case["job"])
    return build_spec(job, [], str(output), num_reduces=case["reducers"], options={"stream": options})


@pytest.mark.parametrize("name", sorted(CASES))
def test_replayed_windows_equal_the_serial_model(client: Client, tmp_path: Path, name: str) -> None:
    case = CASES[name]
    rng = random.Random(name)
    datas = [event_stream(rng, 400, case["disorder"], case["back"], case.get("texts")) for _ in range(case["sources"])]
    for number, data in enumerate(datas):
        (tmp_path / f"s{number}.jsonl").write_bytes(data)
    sources = [f"replay:{tmp_path / f's{number}.jsonl'}" for number in range(len(datas))]
    spec = spec_of(case, sources, tmp_path / "out")
    status = run_stream(client, spec, progress=False, timeout=60, view_interval=None)
    check(tmp_path / "out", datas, case, status["report"])


def test_a_tailed_file_written_in_pieces_then_stopped_equals_the_serial_model(client: Client, tmp_path: Path) -> None:
    """Lines cut anywhere as they are appended; once every record was read, ``hop stop`` writes the open windows
    as they are: with nothing left unread, they hold what the model says."""
    case = dict(job="WordSumDifferential", window="2s", slide="1s", lateness=1.5, reducers=2)
    rng = random.Random(7)
    datas = [event_stream(rng, 300, 0.2, 3.0) for _ in range(2)]
    logs = tmp_path / "logs"
    logs.mkdir()
    for number, data in enumerate(datas):
        (logs / f"s{number}.log").write_bytes(data[: len(data) // 3])
    sources = [f"tail:{logs}?glob=s{number}.log" for number in range(len(datas))]
    spec = WindowSpec.parse(case["window"], case["slide"])
    late = model(datas, case["job"], spec.unit, spec.size, spec.slide, case["lateness"]).late
    expected_read = sum(len(good_records(data)[0]) for data in datas) - sum(map(len, late))
    problems: list[str] = []

    def feed(job_id: str) -> None:
        watcher = Client(client.address, timeout=30)
        try:
            positions = [len(data) // 3 for data in datas]
            while any(position < len(data) for position, data in zip(positions, datas, strict=True)):
                number = rng.randrange(len(datas))
                piece = datas[number][positions[number] : positions[number] + rng.randint(1, 2000)]
                with (logs / f"s{number}.log").open("ab") as file:
                    file.write(piece)
                positions[number] += len(piece)
                time.sleep(rng.choice([0, 0.01, 0.03]))
            deadline = time.monotonic() + 30
            while watcher.status(job_id).get("input_records", 0) < expected_read:
                if time.monotonic() > deadline:
                    problems.append("the maps did not read every record within 30 s")
                    break
                time.sleep(0.1)
            watcher.stop(job_id)
        finally:
            watcher.close()

    feeder: list[threading.Thread] = []

    def submitted(job_id: str) -> None:
        feeder.append(threading.Thread(target=feed, args=(job_id,), daemon=True))
        feeder[0].start()

    status = run_stream(client, spec_of(case, sources, tmp_path / "out"), progress=False, timeout=60,
                        view_interval=None, on_submitted=submitted)  # fmt: skip
    feeder[0].join(timeout=30)
    assert not problems
    check(tmp_path / "out", datas, case, status["report"])
