"""The settings of a continuous job, as they travel in ``JobSpec.options["stream"]``.

Built by the CLI (``hop run JOB --source URL --window 60s --slide 10s ...``) or by :func:`stream_options`, checked
once at submission (bad windows, fidelity or sources fail before anything starts), read by every stream task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hop.stream.windows import WindowSpec, WindowSpecError


@dataclass(frozen=True)
class StreamOptions:
    sources: tuple[str, ...]
    """One stream map per source URL (``hop.stream.sources``)."""
    window: WindowSpec
    lateness: float = 0.0
    """Seconds a time window's panes stay open after the newest event time (out-of-order records)."""
    fidelity: float = 1.0
    """Emit a window once this share of its cells (sources x panes) is present (C2); 1 waits for all."""
    max_latency: float | None = None
    """Emit a window at most this many seconds after its first source sealed past its end; maps shed the records of
    panes whose deadline passed."""
    checkpoint_windows: int = 5
    checkpoint_seconds: float = 5.0
    seal_interval: float = 0.2
    """How often a map reports a watermark advance that sealed no data (empty spill)."""
    pause_threshold: int = 16
    """A map stops reading its source while more of its spills than this are not yet at every reducer."""
    sink: str | None = None
    """A ZeroMQ endpoint that reducers connect PUB sockets to, publishing every window as it is written."""
    deltas: bool = True
    """Reducers append the windows of each checkpoint to a delta file for the Parquet view; without a view
    (``--no-view``) they would only fill the disk, since compaction is what deletes them."""
    duration: float | None = None
    """The coordinator stops the job (as ``hop stop`` does) this many seconds after it was submitted: kept there,
    not by the submitting client, so a job outlives neither its ``--duration`` nor a client that went away."""
    keep_windows: int | None = None
    """The coordinator keeps the folders of the newest N windows in ``OUT/windows`` and removes older ones as the job
    runs (``--keep-windows``); None keeps every one. A job runs for days: a window every few seconds is tens of
    thousands of folders a day, which nothing else removes."""
    directory: str | None = None
    """The directory relative ``tail:`` and ``replay:`` paths are in: the submitting command's working directory
    (a worker's is another, wherever it was started), as batch inputs are made absolute. None: the task's own."""

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("a continuous job needs at least one --source")
        if (too_many := self.window.too_many_windows()) is not None:  # (here: the coordinator refuses it too)
            raise ValueError(too_many)
        if not 0 < self.fidelity <= 1:
            raise ValueError(f"--fidelity must be in (0, 1], got {self.fidelity}")
        if self.max_latency is not None and self.max_latency <= 0:
            raise ValueError(f"--max-latency must be positive, got {self.max_latency}")
        # Each named with its option and value ("lateness must be >= 0, checkpoint intervals positive" left the
        # user to guess which of three was meant).
        if not self.lateness >= 0:
            raise ValueError(f"--lateness must be 0 or more, got {self.lateness}")
        if not self.checkpoint_seconds > 0:
            raise ValueError(f"--checkpoint-seconds must be positive, got {self.checkpoint_seconds}")
        if self.checkpoint_windows < 1:
            raise ValueError(f"--checkpoint-every must be at least 1 window, got {self.checkpoint_windows}")
        if self.duration is not None and self.duration <= 0:
            raise ValueError(f"--duration must be positive, got {self.duration}")
        if self.keep_windows is not None and self.keep_windows < 1:
            raise ValueError(f"--keep-windows must be at least 1, got {self.keep_windows}")

    def to_wire(self) -> dict[str, Any]:
        return {
            "sources": list(self.sources),
            "window": self.window.to_wire(),
            "lateness": self.lateness,
            "fidelity": self.fidelity,
            "max_latency": self.max_latency,
            "checkpoint_windows": self.checkpoint_windows,
            "checkpoint_seconds": self.checkpoint_seconds,
            "seal_interval": self.seal_interval,
            "pause_threshold": self.pause_threshold,
            "sink": self.sink,
            "deltas": self.deltas,
            "duration": self.duration,
            "keep_windows": self.keep_windows,
            "directory": self.directory,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> StreamOptions:
        fields = dict(data)
        fields["sources"] = tuple(fields["sources"])
        fields["window"] = WindowSpec.from_wire(fields["window"])
        return cls(**fields)

    @classmethod
    def from_spec(cls, spec: Any) -> StreamOptions:
        return cls.from_wire(spec.options["stream"])


def stream_options(
    sources: list[str],
    window: str,
    slide: str | None = None,
    lateness: float = 0.0,
    fidelity: float = 1.0,
    max_latency: float | None = None,
    checkpoint_windows: int = 5,
    checkpoint_seconds: float = 5.0,
    sink: str | None = None,
    deltas: bool = True,
    duration: float | None = None,
    directory: str | None = None,
    keep_windows: int | None = None,
) -> dict[str, Any]:
    """The ``options["stream"]`` of a continuous job, validated; raises ValueError with what to change."""
    spec = window_spec(window, slide)
    if lateness and spec.unit != "time":
        raise ValueError("--lateness applies to time windows only (record and byte windows have no late records)")
    return StreamOptions(
        tuple(sources),
        spec,
        lateness,
        fidelity,
        max_latency,
        checkpoint_windows,
        checkpoint_seconds,
        sink=sink,
        deltas=deltas,
        duration=duration,
        keep_windows=keep_windows,
        directory=directory,
    ).to_wire()


def window_spec(window: str, slide: str | None = None) -> WindowSpec:
    """``--window``/``--slide`` parsed and checked as :class:`StreamOptions` checks them (too many windows a record
    is refused); raises ValueError with what to change. For a command to refuse them before it starts a cluster."""
    try:
        spec = WindowSpec.parse(window, slide)
    except WindowSpecError as error:
        raise ValueError(str(error)) from None
    if (too_many := spec.too_many_windows()) is not None:
        raise ValueError(too_many)
    return spec
