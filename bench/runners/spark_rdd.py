"""The ``pyspark-rdd`` contender: the job's own Python functions on Spark's RDD API.

    python -m bench.runners.spark_rdd --job JOB.py --out OUT [--parallelism 2] INPUT...

Each input file is read with ``sc.textFile`` and mapped by ``mapPartitions`` (so the map sees its file name,
as in hop); aggregate jobs then ``reduceByKey`` with the aggregate's merge, generic jobs combine map-side per
partition and ``groupByKey`` + reduce, into ``2 × parallelism`` partitions (as
``spark.sql.shuffle.partitions`` for the SQL contender); the result is saved with ``saveAsTextFile`` in hop's
output format.
"""

from __future__ import annotations

import shutil
import time
from functools import partial

from bench.runners import common
from bench.runners.spark_session import start_spark


def build(sc, job_path: str, files: list[str], partitions: int):  # type: ignore[no-untyped-def]
    """The RDD of formatted output lines, with ``partitions`` reduce-side partitions."""
    plan = common.load_plan(job_path)
    generic = plan.aggregate is None
    mapper = common.spark_map_combine_partition if generic else common.spark_map_partition
    parts = [sc.textFile(path).mapPartitions(partial(mapper, job_path, path)) for path in files]
    pairs = parts[0] if len(parts) == 1 else sc.union(parts)
    if generic:
        result = pairs.groupByKey(partitions).flatMap(partial(common.spark_reduce, job_path))
    else:
        aggregate = plan.aggregate
        assert aggregate is not None
        builtin = type(aggregate).__module__ == "hop.aggregates"
        merge = aggregate.merge if builtin else partial(common.spark_merge, job_path)
        states = pairs.reduceByKey(merge, partitions)
        if not plan.reduce_is_aggregate:
            result = states.flatMap(lambda item: common.spark_reduce(job_path, (item[0], [item[1]])))
        elif plan.finish_is_identity:
            result = states
        else:
            result = states.mapValues(partial(common.spark_finish, job_path))
    return result.map(common.format_line)


def main() -> None:
    args = common.runner_arguments(__doc__, parallelism=True)
    spark, startup = start_spark("bench-pyspark-rdd", args.parallelism)
    began = time.perf_counter()
    shutil.rmtree(args.out, ignore_errors=True)
    files = [str(path) for path in common.input_files(args.inputs)]
    build(spark.sparkContext, args.job, files, 2 * args.parallelism).saveAsTextFile(args.out)
    job = time.perf_counter() - began
    spark.stop()
    common.emit_result(startup_s=startup, job_s=job)


if __name__ == "__main__":
    main()
