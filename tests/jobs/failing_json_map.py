"""A jsonl job whose map raises on the record whose word is 'boom'."""

from hop import Job


class FailingJsonMap(Job):
    input_format = "jsonl"

    def map(self, offset, record):
        if record["word"] == "boom":
            raise RuntimeError("cannot handle boom")
        yield record["word"], 1

    def reduce(self, key, values):
        yield key, sum(values)
