"""IntEnum members as keys, alone and in tuples, with a hand-written combine and reduce: the shuffle sends a member
as its int (``shuffle.keys.plain_key``), so combine and reduce receive ``1``, not ``Color.RED``, on either engine.
Each output value says what the reduce and the combines received: ``[key types, combine's key types, count]``."""

import enum

from hop import Job


class Color(enum.IntEnum):
    RED = 1
    GREEN = 2


def kinds(key):
    return ",".join(type(part).__name__ for part in key) if isinstance(key, tuple) else type(key).__name__


class EnumKeys(Job):
    def map(self, offset, line):
        for word in line.split():
            color = Color[word.upper()]
            yield color, 1
            yield ("pair", color), 1

    def combine(self, key, counts):
        yield key, (kinds(key), sum(counts))

    def reduce(self, key, combined):
        combined = list(combined)
        combine_kinds = sorted({kind for kind, _ in combined})
        yield key, [kinds(key), combine_kinds, sum(count for _, count in combined)]
