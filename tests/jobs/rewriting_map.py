"""Test job: its first map call rewrites the file being read at the same size (upper case), a second later by its
modification time, as an editor or a re-run export would: the rest of the split then comes from the new version."""

import os
from typing import Any

from hop import Job


class RewritingMap(Job):
    rewritten = False

    def map(self, offset: int, line: str) -> Any:
        if not self.rewritten and self.input_file is not None:
            self.rewritten = True
            with open(self.input_file, "rb") as file:
                text = file.read()
            status = os.stat(self.input_file)
            with open(self.input_file, "wb") as file:
                file.write(text.upper())
            later = status.st_mtime_ns + 10**9
            os.utime(self.input_file, ns=(later, later))
        yield line, 1
