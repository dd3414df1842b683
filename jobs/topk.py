"""The most frequent keys of a counting job's output: run after it in a pipeline, or on its output folder.

    hop run jobs/wordcount.py jobs/topk.py data/words.txt -o out/
    hop run jobs/topk.py counts/ -o top/      # counts/: what `hop run jobs/wordcount.py ... -o counts/` wrote

Reads ``(key, count)`` pairs (the output of ``jobs/wordcount.py`` or any job whose values are counts) and writes one
line: ``"top"`` and the ``K`` largest ``[count, key]`` pairs, largest first (ties broken by key, largest first).
"""

from hop import Job
from hop.aggregates import TopK

K = 20


class TopWords(Job):
    input_format = "output"  # a hop job's part files; in a pipeline, the step before's output whatever this says

    def map(self, key, count):
        yield "top", (count, key)

    combine = reduce = TopK(K)
