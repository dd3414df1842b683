"""The description of a submitted job, as it travels from the client to the coordinator and to tasks.

A :class:`JobSpec` is plain data (msgpack-able as a dict); the user's class travels as cloudpickle bytes in
``job_code`` and is only unpickled inside task processes. ``load_job`` turns it back into a :class:`hop.Job`.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import cloudpickle

from hop.job import INPUT_FORMATS, Job

MODES = ("pipelined", "blocking")


@dataclass(frozen=True)
class JobSpec:
    """Everything the engine needs to run one step of a job."""

    job_code: bytes
    name: str
    inputs: tuple[str, ...]
    output: str
    num_reduces: int = 1
    mode: str = "pipelined"
    step: int = 0
    num_steps: int = 1
    input_format: str = "text"
    split_size: int = 32 << 20
    spill_records: int = 2_000_000
    reduce_memory: int = 256 << 20
    overwrite: bool = False
    job_id: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    """Further settings, all optional: ``max_attempts`` (4), ``skip_bad_records`` (0), ``speculative`` (False),
    ``unsent_threshold`` (2, flow control), ``max_line_bytes`` (256 MiB)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.num_reduces < 1:
            raise ValueError(f"a job needs at least one reducer, got {self.num_reduces}")
        if self.input_format not in (*INPUT_FORMATS, "output"):
            raise ValueError(f"input format must be one of {INPUT_FORMATS}, got {self.input_format!r}")
        if self.split_size <= 0 or self.spill_records <= 0 or self.reduce_memory <= 0:
            raise ValueError("split size, spill records and reduce memory must be positive")

    def to_wire(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["inputs"] = list(self.inputs)
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> JobSpec:
        data = dict(data)
        data["inputs"] = tuple(data["inputs"])
        return cls(**data)

    def with_id(self, job_id: str) -> JobSpec:
        return dataclasses.replace(self, job_id=job_id)


def dump_job_class(job_class: type[Job]) -> bytes:
    """Serialize a job class by value, so task processes need not import the user's file."""
    module = sys.modules[job_class.__module__]
    by_value = job_class.__module__ != "__main__"  # cloudpickle already pickles __main__ by value
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(job_class)
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)


@lru_cache(maxsize=16)
def load_job_class(job_code: bytes) -> type[Job]:
    job_class = cloudpickle.loads(job_code)
    if not (isinstance(job_class, type) and issubclass(job_class, Job)):
        raise TypeError(f"job code does not hold a hop.Job subclass but {job_class!r}")
    return job_class
