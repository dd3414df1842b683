"""Page views per (language, hour of day): the HOP demo query over Wikipedia page-count files.

Input lines look like ``lang page_title views bytes`` in hourly files named ``pagecounts-YYYYMMDD-HH0000.gz``, as
Wikipedia published them; the hour comes from the file name. Malformed lines are counted, not silently dropped
(counter ``pageviews/malformed_lines``).
"""

import os
import re

from hop import Job

FILE_HOUR = re.compile(r"pagecounts-\d{8}-(\d{2})\d{4}")


class PageViews(Job):
    def setup(self):
        self._hour = None

    def map(self, offset, line):
        if self._hour is None:
            match = FILE_HOUR.search(os.path.basename(self.input_file or ""))
            if match is None:
                raise ValueError(f"input file {self.input_file} is not named pagecounts-YYYYMMDD-HH0000[.gz]")
            self._hour = int(match.group(1))
        fields = line.split(" ")
        if len(fields) != 4 or not fields[2].isdigit():
            self.increment_counter("pageviews", "malformed_lines")
            return
        yield (fields[0], self._hour), int(fields[2])

    def combine(self, key, views):
        yield key, sum(views)

    reduce = combine
