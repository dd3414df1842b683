"""The ``mrjob`` contender: the job's own functions wrapped in an ``MRJob``, run by mrjob's inline runner.

    python -m bench.runners.mr_job --job JOB.py --out OUT INPUT...

The MRJob's mapper, combiner and reducer delegate to the hop job (loaded in ``mapper_init`` and friends):
values are lifted for aggregate jobs, combined with the aggregate's merge or the user's ``combine`` (none when
the job has none), and reduced by ``finish`` or the user's ``reduce``. Keys cross mrjob's JSON protocol, so
lists are turned back into tuples before the job's functions see them. The output is mrjob's ``part-NNNNN``
files, which use the same ``json(key) TAB json(value)`` lines as hop.
"""

from __future__ import annotations

import os
import shutil
import time

from mrjob.compat import jobconf_from_env
from mrjob.job import MRJob
from mrjob.step import MRStep

from bench.runners import common

JOB_ENV = "BENCH_HOP_JOB"


class HopJob(MRJob):
    """Any one-step hop job, as mrjob sees it."""

    def steps(self):  # type: ignore[no-untyped-def]
        plan = self._plan()
        combine = self.combiner if plan.combine is not None else None
        return [
            MRStep(
                mapper_init=self.mapper_init,
                mapper=self.mapper,
                mapper_final=self.mapper_final,
                combiner=combine,
                reducer=self.reducer,
            )
        ]

    def _plan(self) -> common.Plan:
        return common.load_plan(os.environ[JOB_ENV])

    def mapper_init(self):  # type: ignore[no-untyped-def]
        plan = self._plan()
        plan.job.input_file = jobconf_from_env("mapreduce.map.input.file")
        plan.job.setup()
        self._number = 0
        self._lift = None if plan.aggregate is None or plan.lift_is_identity else plan.aggregate.lift

    def mapper(self, _, line):  # type: ignore[no-untyped-def]
        plan = self._plan()
        self._number += 1
        pairs = plan.map(self._number, line)
        if pairs is None:
            return
        lift = self._lift
        for key, value in pairs:
            yield key, value if lift is None else lift(value)

    def mapper_final(self):  # type: ignore[no-untyped-def]
        self._plan().job.teardown()
        return iter(())

    def combiner(self, key, values):  # type: ignore[no-untyped-def]
        plan = self._plan()
        key = common.freeze(key)
        if plan.aggregate is not None:
            yield key, plan.aggregate.fold_values(common.freeze(value) for value in values)
        else:
            yield from plan.combine(key, values) or ()

    def reducer(self, key, values):  # type: ignore[no-untyped-def]
        plan = self._plan()
        key = common.freeze(key)
        if plan.aggregate is not None:
            values = (common.freeze(value) for value in values)
        yield from common.reduce_group(plan, key, values)


def main() -> None:
    args = common.runner_arguments(__doc__)
    os.environ[JOB_ENV] = os.path.abspath(args.job)
    began = time.perf_counter()
    shutil.rmtree(args.out, ignore_errors=True)
    files = common.input_files(args.inputs)
    job = HopJob(args=["-r", "inline", "--no-conf", "--output-dir", args.out, *files])
    with job.make_runner() as runner:
        runner.run()
    common.emit_result(job_s=time.perf_counter() - began)


if __name__ == "__main__":
    main()
