"""How an mrjob job's records travel on hop between its substeps (input -> mapper -> reducer -> next mapper ...).

Under mrjob every substep reads and writes lines with the protocols ``MRJob.pick_protocols`` picks (INPUT_PROTOCOL
first, INTERNAL_PROTOCOL between substeps, OUTPUT_PROTOCOL last), and Hadoop groups and sorts the encoded lines by
the text before their first TAB. On hop an :class:`Edge` between two substeps carries records in one of two forms:

- native: the pairs themselves, when both sides use a JSON key/value protocol (mrjob's default ``JSONProtocol``),
  which saves encoding every value. The reading side gets what a JSON round trip gives (tuples become lists, dict
  keys strings). Keys group and sort as Hadoop groups and sorts mrjob's lines, by their encoded text: every key is
  its JSON text as ``bytes`` in the shuffle (:meth:`Edge.encode` on the map side, read back by the combiner or
  reducer), so ``1``, ``1.0`` and ``true`` are three keys, ``[1, 2]`` and ``[1, 2.0]`` two, a float NaN one
  (``NaN``), dict keys work, and a reducer gets its keys in the order of their bytes (``10`` before ``2``,
  ``"new york"`` before ``"new"``), as each of mrjob's reducer tasks does (str and int keys were themselves in
  the shuffle, so sorted by value: 2 before 10). No JSON protocol writes bytes (a job yielding a bytes key fails
  under mrjob), so a bytes shuffle key stands for nothing else. Between steps (a reducer's output, a file or a
  pipe) records are hop's JSON lines; a step without a mapper gets one that puts its keys in this form
  (:meth:`Edge.to_shuffle`).
- lines: any other protocol (``ReprProtocol``, ``PickleProtocol``, ``RawProtocol``, value protocols, the job's
  own): the encoded line as the pair ``(text before the first TAB, text after it or None)``, both decoded as
  Latin-1, so every byte survives and keys group and sort exactly as Hadoop groups and sorts them. What one write
  gave is cut at its line breaks, as mrjob's next substep reads it (:func:`_lines_read`).

The first substep reads the input lines with :class:`InputEdge`; the last writes lines with OUTPUT_PROTOCOL
(:func:`final_edge`), which :func:`line_of_output` turns back into the bytes mrjob would have written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

from hop.usertrace import suspended_at

__all__ = [
    "Edge",
    "InputEdge",
    "as_text",
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


def _standard_key_text(key: Any) -> bytes:
    """StandardJSONProtocol's ``_dumps(key)``, faster for floats (its JSON text is ASCII)."""
    return _json_text(key).encode("ascii")


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


def _lines_read(written: bytes) -> Iterator[Pair]:
    """The records the next substep reads from what one ``write`` of a protocol gave, as mrjob's tasks read lines
    (and Hadoop's streaming splits them): one per line, cut at ``\\n`` only, each without the ``\\r`` and ``\\n``
    it ends with (mrjob reads ``line.rstrip(b"\\r\\n")``). So a Raw or Text protocol's value holding a line break
    reaches the next substep as two records, and one ending with ``\\r`` without it, as under mrjob."""
    for line in written.split(b"\n"):
        yield _split(line.rstrip(b"\r"))


def _join(key: str, rest: str | None) -> bytes:
    return (key if rest is None else f"{key}\t{rest}").encode("latin-1")


def line_of_output(key: str, rest: str | None) -> bytes:
    """The line (without its line break) a record of the last substep stands for."""
    return _join(key, rest)


class UnwritablePairError(TypeError):
    """A pair the job's protocol cannot write (a set under JSONProtocol): :func:`unwritable_pair` words it."""


def unwritable_pair(writer: Any, key: Any, value: Any, error: Exception) -> UnwritablePairError:
    """The error of a pair ``writer``, a substep's protocol, could not write: json's own ("Object of type set is not
    JSON serializable") named neither the protocol nor the pair."""
    shown = [
        text if len(text := repr(item)) <= 200 else f"{text[:200]}... ({len(text):,} characters)"
        for item in (key, value)
    ]
    return UnwritablePairError(
        f"{type(writer).__name__} cannot write the pair (key {shown[0]}, value {shown[1]}): "
        f"{type(error).__name__}: {error}: yield keys and values it can write, or give the step a protocol that can"
    )


def _unwritable(writer: Any, pairs: Iterable[Any], key: Any, value: Any, error: Exception) -> UnwritablePairError:
    """:func:`unwritable_pair`, its traceback the ``yield`` of the job's generator ``pairs`` that gave the pair
    (none for a list): raised ``from None``, it showed only the engine's frames and json's, not the job's line."""
    return unwritable_pair(writer, key, value, error).with_traceback(suspended_at(pairs))


class Edge:
    """Records from one substep (which encodes them with ``writer``) to the next (which decodes them with
    ``reader``); ``native`` picks the form (see the module docstring), ``shuffled`` says whether they go through
    the shuffle (out of a mapper) or through a step's output (out of a reducer)."""

    def __init__(self, writer: Any, reader: Any, native: bool, shuffled: bool = False) -> None:
        self.writer = writer
        self.reader = reader
        self.native = native
        self.shuffled = shuffled
        kind = type(writer)
        standard = kind.__module__ == "mrjob.protocol" and kind.__name__.startswith("StandardJSON")
        if native:
            # A key's text as the writer writes it, read back as the reader reads it: what mrjob's lines carry.
            self._key_text: Callable[[Any], bytes] = _standard_key_text if standard else writer._dumps
            self._read_key: Callable[[bytes], Any] = reader._loads
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
            return self._shuffle_pairs(pairs) if self.shuffled else hashable_keys(pairs)
        return self._lines(pairs)

    def _shuffle_pairs(self, pairs: Iterable[Any]) -> Iterator[Any]:
        """Pairs for the shuffle of a native edge: every key as its JSON text (see the module docstring), so that
        keys group and sort by it."""
        key_text = self._key_text
        for pair in pairs:
            kind = type(pair)
            if ((kind is tuple or kind is list) or isinstance(pair, tuple | list)) and len(pair) == 2:
                try:
                    text = key_text(pair[0])
                except (TypeError, ValueError) as error:
                    raise _unwritable(self.writer, pairs, pair[0], pair[1], error) from None
                yield text, pair[1]
            else:  # (not a pair, a two-letter str too: the map buffer's check names it at the job's yield)
                yield pair

    def to_shuffle(self, key: Any, value: Any) -> Iterator[Any]:
        """The mapper of a step without one whose records come from a native edge: the record, its key in the
        shuffle's form (hop's identity map would group ``1`` and ``1.0``, read back from the step's output, as
        one key)."""
        return self._shuffle_pairs(((key, value),))

    def _protocol_lines(self, pairs: Iterable[Any]) -> Iterator[Pair]:
        write = self.writer.write
        if self.reader is None:  # (the last substep's: its lines are written out as they are)
            for key, value in pairs:
                try:
                    line = write(key, value)
                except (TypeError, ValueError, AttributeError) as error:  # (AttributeError: a str's encode)
                    raise _unwritable(self.writer, pairs, key, value, error) from None
                yield _split(line)
            return
        for key, value in pairs:
            try:
                line = write(key, value)
            except (TypeError, ValueError) as error:
                raise _unwritable(self.writer, pairs, key, value, error) from None
            if isinstance(line, str):  # a job's own protocol may write text
                line = line.encode("utf-8")
            if b"\n" in line or line.endswith(b"\r"):
                yield from _lines_read(line)
            else:
                yield _split(line)

    def _json_pairs(self, pairs: Iterable[Any]) -> Iterator[Pair]:
        # StandardJSONProtocol's lines, made faster: its JSON text is ASCII, so it is its own Latin-1 decoding.
        for key, value in pairs:
            try:
                line = _json_text(key), _json_text(value)
            except (TypeError, ValueError) as error:
                raise _unwritable(self.writer, pairs, key, value, error) from None
            yield line

    def _json_values(self, pairs: Iterable[Any]) -> Iterator[Pair]:
        for key, value in pairs:  # StandardJSONValueProtocol
            try:
                text = _json_text(value)
            except (TypeError, ValueError) as error:
                raise _unwritable(self.writer, pairs, key, value, error) from None
            yield text, None

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
            key = self._read_key(key) if type(key) is bytes else key  # (its JSON text: Edge._shuffle_pairs)
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

    def show_key(self, key: Any) -> str:
        """A key of this edge's shuffle as errors name it (``hop.job.Step.show_key``): as the substep yielded it,
        read back from its encoded text by the reader's ``_loads`` where it has one (mrjob's key/value protocols:
        a Latin-1 line key ``'Ã¥lice'`` is ``'ålice'``, a pickled one is what it pickles); else that text, decoded
        as UTF-8, or if it is not UTF-8 (no protocol's need be) as the bytes it is (``b'caf\\xe9'``)."""
        if type(key) is bytes:  # (a native key's JSON text)
            text = key
        elif self.native or type(key) is not str:
            return repr(key)  # (not a key of this edge's shuffle: as it is)
        else:
            text = key.encode("latin-1")
        try:
            return repr(self._read_key(text) if self.native else self.reader._loads(text))
        except Exception:  # (no _loads, or text that it cannot read: the text shows what there is)
            pass
        try:
            return repr(text.decode("utf-8"))
        except UnicodeDecodeError:
            return repr(text)

    def passing_on(self, key: Any, values: Iterable[Any]) -> Iterator[Any]:
        """The reduce of a step without a reducer whose mapper writes to a native edge: every value of every key,
        in order, the key as the next substep would read it (read back from its JSON text in the shuffle)."""
        key = self._read_key(key) if type(key) is bytes else key
        for value in values:
            yield key, value


class InputEdge:
    """The input lines (hop's text records) as the first substep reads them with INPUT_PROTOCOL: a line that is
    not UTF-8 arrives with its bytes kept (``hop.inputs.KEEP_BYTES``), which the protocol reads (mrjob's text
    protocols as Latin-1: :func:`as_text`)."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        kind = type(reader)
        # mrjob's default on Python 3: RawValueProtocol is TextValueProtocol, which gives (None, the line).
        self.text_values = kind.__module__ == "mrjob.protocol" and kind.__name__ == "TextValueProtocol"

    def decode(self, offset: Any, line: str) -> Pair:
        if self.text_values:
            return None, as_text(line)
        decoded: Pair = self.reader.read(line.encode("utf-8", "surrogateescape").rstrip(b"\r"))
        return decoded


def as_text(line: str) -> str:
    """An input line as mrjob's TextValueProtocol reads it: UTF-8, or Latin-1 if it is not UTF-8 (hop read such a
    line with its bytes kept as escapes, ``hop.inputs.KEEP_BYTES``), without the carriage returns it ends with
    (mrjob strips them all, ``x\\r\\r\\n`` is ``x``; hop's reader took one)."""
    if line.endswith("\r"):
        line = line.rstrip("\r")
    if line.isascii():
        return line
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # (only an escaped byte cannot be encoded)
        return line.encode("utf-8", "surrogateescape").decode("latin-1")
    return line


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
            native = is_json_protocol(writer) and is_json_protocol(reader)
            out[substep] = Edge(writer, reader, native, shuffled=substep[1] == "mapper")
    return InputEdge(pairs[0][0]), out
