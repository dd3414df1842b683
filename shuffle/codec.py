"""msgpack as the engine uses it for records: ints of any size.

msgpack's own ints stop at 64 bits, but Python's do not, and a ``Sum`` of large counts or a user's big-int key must
cross the shuffle and come back equal. An int outside msgpack's range is packed as the extension type
:data:`BIG_INT` holding its two's-complement bytes; the packer calls the hook only for values it cannot pack
itself, so records of ordinary ints cost nothing more.
"""

from __future__ import annotations

from typing import IO, Any

import msgpack

__all__ = ["BIG_INT", "packb", "packer", "unpackb", "unpacker"]

BIG_INT = 1
"""The msgpack extension type code of an int outside -2**63 .. 2**64-1."""


def _extend(value: Any) -> msgpack.ExtType:
    """The packer's hook for what msgpack cannot pack: big ints as :data:`BIG_INT`; anything else is refused
    (``TypeError``), as msgpack refuses it."""
    if isinstance(value, int):
        return msgpack.ExtType(BIG_INT, value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True))
    raise TypeError(f"can not serialize {type(value).__name__!r} object")


def _unextend(code: int, data: bytes) -> Any:
    if code == BIG_INT:
        return int.from_bytes(data, "big", signed=True)
    return msgpack.ExtType(code, data)


def packer() -> msgpack.Packer:
    """A packer of records: str as str, bytes as bin, ints of any size."""
    return msgpack.Packer(use_bin_type=True, default=_extend)


def unpacker(file_like: IO[bytes] | None = None, read_size: int = 1 << 16) -> msgpack.Unpacker:
    """An unpacker of what :func:`packer` packed: arrays as tuples (keys stay hashable), str as str, bin as bytes,
    maps with any keys, no limit on a buffered object's size."""
    return msgpack.Unpacker(
        file_like,
        use_list=False,
        raw=False,
        strict_map_key=False,
        max_buffer_size=0,
        read_size=read_size,
        ext_hook=_unextend,
    )


def packb(value: Any) -> bytes:
    """``value`` packed as :func:`packer` packs it."""
    return msgpack.packb(value, use_bin_type=True, default=_extend)


def unpackb(data: bytes, use_list: bool = False) -> Any:
    """What :func:`packb` packed (arrays as tuples unless ``use_list``)."""
    return msgpack.unpackb(data, use_list=use_list, raw=False, strict_map_key=False, ext_hook=_unextend)
