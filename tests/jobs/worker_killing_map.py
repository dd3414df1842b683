"""A map whose code ends the worker it runs under (SIGKILL to its parent process) at the line ``boom``: every
worker it is retried on dies, so a cluster loses them all."""

import os
import signal

from hop import Job
from hop.aggregates import Sum


class WorkerKillingMap(Job):
    def map(self, offset, line):
        if line.strip() == "boom":
            os.kill(os.getppid(), signal.SIGKILL)
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()
