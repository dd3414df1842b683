"""Keys of every msgpack-able type at once: the engine must order them, not crash."""

from hop import Job


class MixedKeys(Job):
    def map(self, offset, line):
        for word in line.split():
            if word.isdigit():
                yield int(word), 1
            elif word == "none":
                yield None, 1
            elif word in ("true", "false"):
                yield word == "true", 1
            elif "." in word:
                yield float(word), 1
            elif "," in word:
                yield tuple(word.split(",")), 1
            else:
                yield word, 1

    def combine(self, key, counts):
        yield key, sum(counts)

    reduce = combine
