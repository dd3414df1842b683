"""Each input line is a float as Python writes it (``nan``, ``inf``, ``1.5``): its own key and value. Its output
holds NaN and infinities, which JSON has no literal for."""

from hop import Job


class FloatValues(Job):
    def map(self, offset, line):
        yield line.strip(), float(line)

    def reduce(self, key, values):
        yield key, max(values)
