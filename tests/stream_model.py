"""A serial model of a continuous query's documented semantics (``docs/stream.md``), for differential tests: what
every window of a job in ``tests/jobs/stream_exact.py`` holds, and which records are late, computed from the
sources' bytes alone, record by record, with none of the engine's code (its panes, spills, reducers).

- A source's lines end at ``\\n``; a blank line is no record and takes no position; a line that is no JSON, or
  whose ``ts`` is missing or not a finite number, is a bad record and takes no position either.
- Positions: the event time (time windows), the ordinal of the good record in its source (record windows), or the
  bytes of the good records before it in its source, newlines included (byte windows).
- Window ``w`` spans ``[w * slide, w * slide + range)``; record and byte windows start at position 0.
- Time windows: a record is late when its pane (``P = gcd(range, slide)``, times in whole microseconds) lies below
  the pane of ``max event time - lateness`` over the records of its own source before it; a late record is in no
  window.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MICROS = 1_000_000


@dataclass
class Model:
    """Expected windows (start -> records and rows) and late records (per source, in order)."""

    windows: dict[float, dict[str, Any]] = field(default_factory=dict)
    late: list[list[tuple[float, str]]] = field(default_factory=list)
    bad: list[int] = field(default_factory=list)


def good_records(data: bytes) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """``(nbytes, event)`` of a source's good records in order, and how many bad ones it held."""
    records, bad = [], 0
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, raw in enumerate(lines):
        line = raw[3:] if number == 0 and raw.startswith(b"\xef\xbb\xbf") else raw
        text = line.decode("utf-8").removesuffix("\r")
        if not text.strip():
            continue
        try:
            event = json.loads(text)
            stamp = event["ts"]
            if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
                raise ValueError(stamp)
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        records.append((len(raw) + 1, event))
    return records, bad


def windows_holding(position: int, size: int, slide: int, from_zero: bool) -> range:
    """The numbers w with ``w * slide <= position < w * slide + size``."""
    first = (position - size) // slide + 1
    return range(max(first, 0) if from_zero else first, position // slide + 1)


def row_values(job: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the job writes for one window's events (word -> value)."""
    if job in ("WordSum", "WordSumDifferential"):
        return dict(Counter(word for event in events for word in event["text"].split()))
    if job == "WholeText":
        return dict(Counter(event["text"] for event in events))
    stamps: dict[str, list[float]] = {}
    for event in events:
        for word in event["text"].split():
            stamps.setdefault(word, []).append(float(event["ts"]))
    if job == "WordStamps":
        return {word: sorted(values) for word, values in stamps.items()}
    if job == "LatestPerWord":
        return {word: max(values) for word, values in stamps.items()}
    raise ValueError(job)


def model(sources: list[bytes], job: str, unit: str, size: int, slide: int, lateness: float = 0.0) -> Model:
    """The expected result of ``job`` over ``sources`` (their bytes) with windows of ``size`` by ``slide`` in
    ``unit`` (``time``: microseconds; ``records``; ``bytes``)."""
    pane = math.gcd(size, slide)
    result = Model()
    members: dict[int, list[dict[str, Any]]] = {}
    for data in sources:
        records, bad = good_records(data)
        result.bad.append(bad)
        late: list[tuple[float, str]] = []
        highest = -math.inf
        offset = 0
        for ordinal, (nbytes, event) in enumerate(records):
            if unit == "time":
                position = math.floor(event["ts"] * MICROS)
                mark = math.floor((highest - lateness) * MICROS) // pane if highest > -math.inf else None
                if mark is not None and position // pane < mark:
                    late.append((float(event["ts"]), event["text"]))
                    continue
                highest = max(highest, event["ts"])
            else:
                position = ordinal if unit == "records" else offset
                offset += nbytes
            for window in windows_holding(position, size, slide, from_zero=unit != "time"):
                members.setdefault(window, []).append(event)
        result.late.append(late)
    scale = MICROS if unit == "time" else 1
    for window, events in members.items():
        start = window * slide / scale if unit == "time" else window * slide
        result.windows[start] = {"records": len(events), "rows": row_values(job, events)}
    return result


def read_output(output: Any) -> tuple[dict[float, dict[str, Any]], dict[float, dict[str, Any]]]:
    """What a job wrote: window start -> records and rows, and window start -> its ``_window.json``."""
    got, metas = {}, {}
    for folder in sorted((output / "windows").iterdir()):
        meta = json.loads((folder / "_window.json").read_text())
        rows: dict[str, Any] = {}
        for part in sorted(folder.glob("part-*")):
            for line in part.read_text(encoding="utf-8").split("\n")[:-1]:
                key, value = line.split("\t")
                assert json.loads(key) not in rows, f"key {key} written twice in window {folder.name}"
                rows[json.loads(key)] = json.loads(value)
        got[meta["start"]] = {"records": meta["records"], "rows": rows}
        metas[meta["start"]] = meta
    return got, metas


def read_late(output: Any, source_count: int) -> list[list[tuple[float, str]]]:
    """The late records each map listed in ``OUT/_late/map-NNNNN.jsonl``, in order."""
    late = []
    for index in range(source_count):
        path = output / "_late" / f"map-{index:05d}.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        late.append([(float(r["event_time"]), r["value"]["text"]) for r in map(json.loads, lines)])
    return late
