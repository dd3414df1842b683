"""How an mrjob job's records travel on hop between its substeps (input -> mapper -> reducer -> next mapper ...).

Under mrjob every substep reads and writes lines with the protocols ``MRJob.pick_protocols`` picks (INPUT_PROTOCOL
first, INTERNAL_PROTOCOL between substeps, OUTPUT_PROTOCOL last), and Hadoop groups and sorts the encoded lines by
the text before their first TAB. On hop an :class:`Edge` between two substeps carries records in one of two forms:

- native: the pairs themselves, when both sides use a JSON key/value protocol (mrjob's default ``JSONProtocol``),
  which saves encoding every record. The reading side gets what a JSON round trip gives (tuples become lists, dict
  keys strings); keys group by value (so ``1`` and ``1.0`` are one key, as they are in hop). A float NaN, in a key
  or in its lists, groups with every other NaN, as mrjob groups the text ``NaN``: the map buffer puts
  :data:`NAN_KEY` in its place as a spill is sorted (found among the spill's distinct keys, nothing per record),
  and a combiner or reducer reads NaN back. ``NAN_KEY`` is bytes, which no JSON protocol writes (a job yielding a
  bytes key fails under mrjob), so it stands for nothing else.
- lines: any other protocol (``ReprProtocol``, ``PickleProtocol``, ``RawProtocol``, value protocols, the job's
  own): the encoded line as the pair ``(text before the first TAB, text after it or None)``, both decoded as
  Latin-1, so every byte survives and keys group and sort exactly as Hadoop groups and sorts them.

The first substep reads the input lines with :class:`InputEdge`; the last writes lines with OUTPUT_PROTOCOL
(:func:`final_edge`), which :func:`line_of_output` turns back into the bytes mrjob would have written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

__all__ = [
    "NAN_KEY",
    "Edge",
    "InputEdge",
    "final_edge",
    "hashable_keys",
    "is_json_protocol",
    "json_like",
    "line_of_output",
    "plan_edges",
]

Pair = tuple[Any, Any]

_JSON_PROTOCOLS = ("StandardJSONProtocol", "SimpleJSONProtocol", "UltraJSONProtocol", "RapidJSONProtocol")
_CONTAINERS = (tuple, list, dict)
_KEYS_TO_READ = (tuple, list, bytes)
"""The types of shuffle keys that :func:`_key_as_read` changes (a key is never a dict)."""

NAN_KEY = b"NaN"
"""What a float NaN in a key of a native edge is in the shuffle (see the module docstring)."""


def is_json_protocol(protocol: Any) -> bool:
    """Whether ``protocol`` (an instance) is one of mrjob's own JSON key/value protocols (not a subclass: a
    subclass may encode differently)."""
    kind = type(protocol)
    return kind.__module__ == "mrjob.protocol" and kind.__name__ in _JSON_PROTOCOLS


def json_like(value: Any) -> Any:
    """``value`` as a JSON round trip gives it back: tuples become lists, dict keys strings."""
    kind = type(value)
    if kind is tuple or kind is list:
        return [json_like(item) if type(item) in _CONTAINERS else item for item in value]
    if kind is dict:
        return {_json_key(key): json_like(item) if type(item) in _CONTAINERS else item for key, item in value.items()}
    return value


def _key_as_read(key: Any) -> Any:
    """A native edge's shuffle key as a combiner or reducer reads it: :func:`json_like`, with NaN for
    :data:`NAN_KEY`."""
    kind = type(key)
    if kind is tuple or kind is list:
        return [_key_as_read(part) for part in key]
    if kind is bytes and key == NAN_KEY:
        return math.nan
    return key


def _as_shuffle_key(key: Any) -> Any:
    """The shuffle key a key yielded on a native edge becomes: lists as tuples, :data:`NAN_KEY` for NaN."""
    kind = type(key)
    if kind is tuple or kind is list:
        return tuple(_as_shuffle_key(part) for part in key)
    if kind is float and key != key:
        return NAN_KEY
    return key


def _json_key(key: Any) -> Any:
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if type(key) is int or type(key) is float:
        return repr(key)
    return key


_ascii_string = json.encoder.encode_basestring_ascii  # what json.dumps gives for a str


def _json_text(value: Any) -> str:
    """Exactly ``json.dumps(value)`` (what mrjob's StandardJSONProtocol writes), without its per-call overhead for
    strings, ints and finite floats."""
    kind = type(value)
    if kind is str:
        return str(_ascii_string(value))
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return json.dumps(value)


def hashable_keys(pairs: Iterable[Any]) -> Iterator[Any]:
    """Pairs with list keys as tuples: JSON keys may be lists (mrjob writes a tuple key as a JSON list, and a later
    step's mapper that passes its key on yields the list), but a hop key must be hashable. The next substep reads a
    JSON list either way (:func:`json_like`)."""
    for pair in pairs:
        if type(pair[0]) is list:
            pair = (_tupled(pair[0]), pair[1])
        yield pair


def _tupled(items: list[Any]) -> tuple[Any, ...]:
    return tuple(_tupled(item) if type(item) is list else item for item in items)


def _split(line: bytes | str) -> Pair:
    if isinstance(line, str):  # a job's own protocol may write text
        line = line.encode("utf-8")
    key, tab, rest = line.partition(b"\t")
    return key.decode("latin-1"), rest.decode("latin-1") if tab else None


def _join(key: str, rest: str | None) -> bytes:
    return (key if rest is None else f"{key}\t{rest}").encode("latin-1")


def line_of_output(key: str, rest: str | None) -> bytes:
    """The line (without its line break) a record of the last substep stands for."""
    return _join(key, rest)


class Edge:
    """Records from one substep (which encodes them with ``writer``) to the next (which decodes them with
    ``reader``); ``native`` picks the form (see the module docstring)."""

    def __init__(self, writer: Any, reader: Any, native: bool) -> None:
        self.writer = writer
        self.reader = reader
        self.native = native
        kind = type(writer)
        standard = kind.__module__ == "mrjob.protocol" and kind.__name__.startswith("StandardJSON")
        self._lines = (
            (self._json_values if kind.__name__ == "StandardJSONValueProtocol" else self._json_pairs)
            if standard
            else self._protocol_lines
        )

    # The producing side. -----------------------------------------------------------------------------------------
    def encode(self, pairs: Iterable[Any] | None) -> Iterable[Any]:
        """What a substep yielded, in this edge's form."""
        if pairs is None:
            return ()
        if self.native:
            return hashable_keys(pairs)
        return self._lines(pairs)

    def _protocol_lines(self, pairs: Iterable[Any]) -> Iterator[Pair]:
        write = self.writer.write
        for key, value in pairs:
            yield _split(write(key, value))

    @staticmethod
    def _json_pairs(pairs: Iterable[Any]) -> Iterator[Pair]:
        # StandardJSONProtocol's lines, made faster: its JSON text is ASCII, so it is its own Latin-1 decoding.
        for key, value in pairs:
            yield _json_text(key), _json_text(value)

    @staticmethod
    def _json_values(pairs: Iterable[Any]) -> Iterator[Pair]:
        for _, value in pairs:  # StandardJSONValueProtocol
            yield _json_text(value), None

    # The consuming side. -----------------------------------------------------------------------------------------
    def decode(self, key: Any, value: Any) -> Pair:
        """One record as the next substep's mapper reads it."""
        if self.native:
            return json_like(key), json_like(value)
        decoded: Pair = self.reader.read(_join(key, value))
        return decoded

    def decode_group(self, key: Any, values: Iterable[Any], sort_values: bool) -> tuple[Any, Iterator[Any]]:
        """One key and its values as a combiner or reducer reads them; ``sort_values`` (mrjob's SORT_VALUES) sorts
        them by their encoded form, as Hadoop's secondary sort does."""
        if self.native:
            key = _key_as_read(key) if type(key) in _KEYS_TO_READ else key
            converted: Iterable[Any] = (json_like(v) if type(v) in _CONTAINERS else v for v in values)
            if sort_values:
                converted = list(converted)
                if len(converted) > 1:
                    # The key's encoding is the same for all: the value's (_KeyCachingProtocol) orders the lines.
                    dumps = getattr(self.writer, "_dumps", None) or (lambda value: self.writer.write(key, value))
                    converted.sort(key=dumps)
            return key, iter(converted)
        rests: Iterable[str | None] = values
        if sort_values:
            rests = sorted(values, key=lambda rest: "" if rest is None else "\t" + rest)
        read = self.reader.read
        decoded = (read(_join(key, rest)) for rest in rests)
        first = next(decoded)
        return first[0], chain((first[1],), (value for _, value in decoded))

    def keeping_key(self, key: Any, decoded_key: Any, pairs: Iterable[Any]) -> Iterator[Any]:
        """A combiner's output on a native edge: hop requires the shuffle key it gave (a tuple where the combiner
        saw a list, :data:`NAN_KEY` where it saw NaN), so pairs whose key is that shuffle key once yielded get it
        back."""
        for out_key, value in pairs:
            yield (key if out_key is decoded_key or _as_shuffle_key(out_key) == key else out_key), value

    def passing_on(self, key: Any, values: Iterable[Any]) -> Iterator[Any]:
        """The reduce of a step without a reducer whose mapper writes to a native edge: every value of every key,
        in order, the key as the next substep would read it (NaN again where the shuffle had :data:`NAN_KEY`)."""
        key = _key_as_read(key) if type(key) in _KEYS_TO_READ else key
        for value in values:
            yield key, value


class InputEdge:
    """The input lines (hop's text records) as the first substep reads them with INPUT_PROTOCOL."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        kind = type(reader)
        # mrjob's default on Python 3: RawValueProtocol is TextValueProtocol, which gives (None, the line).
        self.text_values = kind.__module__ == "mrjob.protocol" and kind.__name__ == "TextValueProtocol"

    def decode(self, offset: Any, line: str) -> Pair:
        if self.text_values:
            return None, line
        decoded: Pair = self.reader.read(line.encode("utf-8"))
        return decoded


def final_edge(writer: Any) -> Edge:
    """The edge out of the last substep: lines in OUTPUT_PROTOCOL."""
    return Edge(writer, None, native=False)


def plan_edges(
    substeps: list[tuple[int, str]], protocols: Callable[[int, str], tuple[Any, Any]]
) -> tuple[InputEdge, dict[tuple[int, str], Edge]]:
    """The edge into the first substep and the edge out of every substep (``(step number, "mapper" or "reducer")``
    in order); ``protocols(step, kind)`` gives the substep's (reader, writer) protocol instances."""
    pairs = [protocols(*substep) for substep in substeps]
    out: dict[tuple[int, str], Edge] = {}
    for number, substep in enumerate(substeps):
        writer = pairs[number][1]
        if number + 1 == len(substeps):
            out[substep] = final_edge(writer)
        else:
            reader = pairs[number + 1][0]
            out[substep] = Edge(writer, reader, is_json_protocol(writer) and is_json_protocol(reader))
    return InputEdge(pairs[0][0]), out
