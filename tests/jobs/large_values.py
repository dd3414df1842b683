"""Large values without a combiner: each input line ``n`` yields one value of 1 MiB (the byte ``n % 256`` repeated)
under key ``n % 4``; the reduce counts a key's values and their bytes (it needs one value at a time)."""

from hop import Job

VALUE_BYTES = 1 << 20


class LargeValues(Job):
    def map(self, offset, line):
        number = int(line)
        yield number % 4, bytes([number % 256]) * VALUE_BYTES

    def reduce(self, key, values):
        count = total = 0
        for value in values:
            count += 1
            total += len(value)
        yield key, [count, total]
