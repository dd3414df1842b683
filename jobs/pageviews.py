"""Page views per (language, hour of day): the HOP demo query over Wikipedia page-count files.

Input lines look like ``lang page_title views bytes`` in hourly files named ``pagecounts-YYYYMMDD-HH0000.gz``, as
Wikipedia published them; the hour comes from the file name. Malformed lines are counted, not silently dropped
(counter ``pageviews/malformed_lines``).

For online aggregation the hour is also the stratum: a file belongs to the stratum of its hour, and the group
``(language, hour)`` draws from that hour's files only, so its estimate scales by the fraction of *that hour's*
files seen (``hop run jobs/pageviews.py DIR -o OUT --snapshot-every 0.1 --order random``).
"""

import os
import re

from hop import Job
from hop.aggregates import Sum

FILE_HOUR = re.compile(r"pagecounts-\d{8}-(\d{2})\d{4}")


def file_hour(path):
    match = FILE_HOUR.search(os.path.basename(path or ""))
    if match is None:
        raise ValueError(f"input file {path} is not named pagecounts-YYYYMMDD-HH0000[.gz]")
    return int(match.group(1))


class PageViews(Job):
    def setup(self):
        self._file = None
        self._hour = None

    def map(self, offset, line):
        if self.input_file != self._file:  # a map task may read several files
            self._file, self._hour = self.input_file, file_hour(self.input_file)
        fields = line.split(" ")
        if len(fields) != 4 or not fields[2].isdigit():
            self.increment_counter("pageviews", "malformed_lines")
            return
        yield (fields[0], self._hour), int(fields[2])

    combine = reduce = Sum()

    def input_stratum(self, path):
        return str(file_hour(path))

    def key_stratum(self, key):
        return str(key[1])
