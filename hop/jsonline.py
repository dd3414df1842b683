"""JSON text of keys and values, fast for the common scalars: the output line format ``json(key) TAB json(value)``.

:data:`to_json` (and :data:`to_json_key`) give exactly what ``json.JSONEncoder(ensure_ascii=False,
separators=(",", ":")).encode`` gives, but strings, ints and finite floats skip the encoder's per-call overhead
(several times faster; the reduce writes one key and one value per output record, snapshots one row per group).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["NotJSONError", "not_json", "to_json", "to_json_column", "to_json_key"]


class NotJSONError(TypeError):
    """An output value JSON has no form for; the message says what to yield instead (the encoder's frames, all
    the traceback has, say nothing more)."""


def not_json(value: Any, role: str = "value") -> Any:
    """The encoder's hook (``default``) for values JSON has no type for: a :class:`NotJSONError` that says what to
    yield instead. ``role`` says what the output line holds it in: ``"key"`` or ``"value"``."""
    if isinstance(value, (bytes, bytearray)):
        raise NotJSONError(
            f"output {role} {value[:60]!r} is bytes, which a JSON output line cannot hold: decode it to str (or "
            "base64 it) before a reduce yields it (in a multi-step job too: each step's output is JSON lines; "
            "bytes are fine between map and reduce)"
        )
    if isinstance(value, set | frozenset):
        raise NotJSONError(
            f"output {role} {value!r:.80} is a set, which has no JSON form: yield a list or tuple instead (sorted, "
            "for the same output in every run)"
        )
    if isinstance(value, Iterator):
        # (the values a reduce gets are an iterator, read once: yielded as they are, the output holds no values)
        raise NotJSONError(
            f"output {role} {value!r:.80} is an iterator ({type(value).__name__}), which has no JSON form: yield "
            "list(...) of it (a reduce's values are an iterator: yield key, list(values))"
        )
    raise NotJSONError(
        f"output {role} {value!r:.80} of type {type(value).__name__} has no JSON form: yield None, bool, int, "
        "float, str, lists/tuples or dicts with str keys"
    )


_encode_str = json.encoder.encode_basestring  # the C implementation when available
_int_repr = int.__repr__
_float_repr = float.__repr__


def _json_text(role: str) -> Callable[[Any], str]:
    """The JSON text function of an output line's ``role`` (``"key"`` or ``"value"``): the same text, and errors
    naming the role (a bytes key is not said to be a value)."""
    encode = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), default=functools.partial(not_json, role=role)
    ).encode

    def json_text(value: Any) -> str:
        kind = type(value)
        if kind is str:
            return str(_encode_str(value))
        if kind is int:
            return _int_repr(value)
        if kind is float and math.isfinite(value):
            return _float_repr(value)
        try:
            return encode(value)
        except NotJSONError:
            raise
        except TypeError:
            bad = _bad_dict_key(value)
            if bad is None:
                raise
            raise NotJSONError(  # (the encoder's own "keys must be str, ..." named neither the dict nor the key)
                f"output {role} {value!r:.80} holds a dict with the key {bad!r:.80} (type {type(bad).__name__}), "
                "which a JSON object cannot have: its keys must be str (int, float, bool and None are written as "
                "str); yield a list of (key, value) pairs instead, or str keys"
            ) from None

    return json_text


def _bad_dict_key(value: Any) -> Any:
    """The first key of a dict in ``value`` (at any depth of dicts, lists and tuples) that JSON cannot write as an
    object's key; ``None`` if there is none."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key is not None and not isinstance(key, str | int | float | bool):
                return key
            found = _bad_dict_key(item)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for item in value:
            found = _bad_dict_key(item)
            if found is not None:
                return found
    return None


to_json = _json_text("value")
"""The JSON text of an output value (or of any value, where the error need not say key: snapshots, late records)."""
to_json_key = _json_text("key")
"""The JSON text of an output key: :data:`to_json`, whose errors say key."""


def to_json_column(values: list[Any], *, keys: bool = False) -> list[str]:
    """``[to_json(v) for v in values]`` (``to_json_key`` for ``keys``), formatted in bulk when the column has one
    simple type (``None`` is ``null``)."""
    kinds = set(map(type, values))
    if kinds <= {str}:
        return list(map(_encode_str, values))
    if kinds <= {int}:
        return list(map(_int_repr, values))
    if kinds <= {float, type(None)}:
        texts = ["null" if v is None else _float_repr(v) for v in values]
        if not _NOT_FINITE.intersection(texts):  # (cheaper than testing every value first)
            return texts
    return list(map(to_json_key if keys else to_json, values))


_NOT_FINITE = frozenset(map(_float_repr, (math.nan, math.inf, -math.inf)))
"""How ``repr`` writes the floats JSON has no literal for (the encoder writes them ``NaN``, ``Infinity``)."""
