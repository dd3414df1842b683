"""Every input line under its file and byte offset, and per word counts under keys Python counts equal or not
(``1``, ``1.0`` and ``True``; ``-0.0`` and ``0.0``; tuples holding ``None``; ints past 64 bits): what
``tests/test_exactness.py`` checks against the same functions run serially."""

import os

from hop import Job


def word_keys(word):
    """The counting keys of one word."""
    size = len(word)
    return [
        size,
        float(size),
        size % 2 == 0,
        -0.0 if size % 3 == 0 else 0.0,
        (size % 3, None if size % 4 == 0 else word[:1]),
        2**70 + size % 3,
        size / 4,
    ]


class LinesAndKeys(Job):
    def map(self, offset, line):
        yield ("line", os.path.basename(self.input_file), offset), line
        for word in line.split():
            for key in word_keys(word):
                yield key, 1

    def combine(self, key, values):
        if isinstance(key, tuple) and key[0] == "line":
            for value in values:
                yield key, value
        else:
            yield key, sum(values)

    def reduce(self, key, values):
        if isinstance(key, tuple) and key[0] == "line":
            for value in values:
                yield key, value
        else:
            yield key, sum(values)
