"""Test job: every input line names an environment variable; the output is its value in the task process."""

import os
from typing import Any

from hop import Job


class EnvironmentVariable(Job):
    def map(self, offset: int, line: str) -> Any:
        yield line, os.environ.get(line)
