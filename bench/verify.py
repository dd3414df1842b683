"""Correctness: every contender's output, parsed into ``{key: value}``, must equal hop's for the same input.

Outputs are the ``part-*`` files of an output directory, either hop's ``json(key) TAB json(value)`` lines
(hop, serial, pyspark-rdd, mrjob) or JSON objects ``{"key": ..., "value": ...}`` (spark-sql, whose struct keys
become tuples of their fields). JSON lists become tuples. Numbers are equal when both are ints and equal, or
when either is a float and they agree within a relative tolerance of 1e-9. A key written more than once keeps
all its values (compared as sorted lists), so duplicates are caught, not overwritten.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REL_TOL = 1e-9
EXAMPLES = 5


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(item) for item in value)
    if isinstance(value, dict):
        return tuple(_freeze(item) for item in value.values())
    return value


def _parse(line: str, output_format: str) -> tuple[Any, Any]:
    if output_format == "jsonl":
        record = json.loads(line)
        return _freeze(record["key"]), _freeze(record["value"])
    key, tab, value = line.partition("\t")
    if not tab:
        raise ValueError(f"no TAB in output line {line[:80]!r}")
    return _freeze(json.loads(key)), _freeze(json.loads(value))


def read_output(directory: Path, output_format: str = "tsv") -> dict[Any, Any]:
    """The records of an output directory as ``{key: value}`` (``{key: [values...]}`` for repeated keys)."""
    parts = sorted(p for p in directory.iterdir() if p.name.startswith("part-") and p.is_file())
    if not parts:
        raise ValueError(f"{directory} holds no part-* files")
    result: dict[Any, Any] = {}
    repeated: dict[Any, list[Any]] = {}
    for part in parts:
        with open(part, encoding="utf-8") as handle:
            for line in handle:
                line = line.rstrip("\n")
                if not line:
                    continue
                key, value = _parse(line, output_format)
                if key in repeated:
                    repeated[key].append(value)
                elif key in result:
                    repeated[key] = [result[key], value]
                else:
                    result[key] = value
    for key, values in repeated.items():
        result[key] = Repeated(sorted(values, key=repr))
    return result


class Repeated(list):  # type: ignore[type-arg]
    """The values of a key that occurs more than once in an output."""


def equal(a: Any, b: Any) -> bool:
    """Deep equality with a relative tolerance for floats."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return math.isclose(a, b, rel_tol=REL_TOL) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


@dataclass
class Comparison:
    """How an output differs from the reference."""

    reference_keys: int
    keys: int
    missing: int = 0
    extra: int = 0
    different: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.different)

    def summary(self) -> str:
        if self.ok:
            return f"ok: {self.keys:,} keys"
        return (
            f"MISMATCH: {self.missing:,} keys missing, {self.extra:,} extra, {self.different:,} "
            f"different (of {self.reference_keys:,}); e.g. " + "; ".join(self.examples)
        )


def compare(reference: dict[Any, Any], output: dict[Any, Any]) -> Comparison:
    """Compare an output with the reference output."""
    result = Comparison(reference_keys=len(reference), keys=len(output))
    for key, expected in reference.items():
        if key not in output:
            result.missing += 1
            if len(result.examples) < EXAMPLES:
                result.examples.append(f"{key!r} missing (expected {expected!r})")
        elif not equal(expected, output[key]):
            result.different += 1
            if len(result.examples) < EXAMPLES:
                result.examples.append(f"{key!r}: {output[key]!r} != {expected!r}")
    for key in output.keys() - reference.keys():
        result.extra += 1
        if len(result.examples) < EXAMPLES:
            result.examples.append(f"{key!r} unexpected ({output[key]!r})")
    return result
