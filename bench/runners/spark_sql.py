"""The ``spark-sql`` contender: the workload as a DataFrame query, where one can express it.

    python -m bench.runners.spark_sql --query wordcount|pageviews --out OUT [--parallelism 2] INPUT...

- ``wordcount``: split each line on Python's whitespace characters (``str.split()``'s set, spelled as a Java
  regex), explode, drop empty tokens, ``groupBy(word).count()``.
- ``pageviews``: split on single spaces, keep lines of 4 fields whose third is all digits, take the hour from
  ``input_file_name()``, ``groupBy(lang, hour).sum(views)``.

Output is JSON lines ``{"key": ..., "value": ...}`` (a struct key for pageviews), which the benchmark parses.
"""

from __future__ import annotations

import argparse
import shutil
import time

from bench.runners import common
from bench.runners.spark_session import start_spark

# Every character Python's str.isspace() accepts, as a Java regex class.
PY_WHITESPACE = r"[\s\x1c-\x1f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+"
FILE_HOUR = r"pagecounts-\d{8}-(\d{2})\d{4}"


def wordcount(spark, files: list[str]):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    words = spark.read.text(files).select(F.explode(F.split("value", PY_WHITESPACE)).alias("word"))
    counts = words.where(F.col("word") != "").groupBy("word").count()
    return counts.select(F.col("word").alias("key"), F.col("count").alias("value"))


def pageviews(spark, files: list[str]):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    lines = spark.read.text(files).select(
        F.split("value", " ", -1).alias("f"), F.regexp_extract(F.input_file_name(), FILE_HOUR, 1).alias("h")
    )
    valid = lines.where((F.size("f") == 4) & F.col("f")[2].rlike("^[0-9]+$"))
    parsed = valid.select(
        F.col("f")[0].alias("lang"), F.col("h").cast("int").alias("hour"), F.col("f")[2].cast("long").alias("views")
    )
    totals = parsed.groupBy("lang", "hour").agg(F.sum("views").alias("value"))
    return totals.select(F.struct("lang", "hour").alias("key"), "value")


QUERIES = {"wordcount": wordcount, "pageviews": pageviews}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--query", required=True, choices=sorted(QUERIES))
    parser.add_argument("--out", required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("inputs", nargs="+")
    args = parser.parse_args()
    spark, startup = start_spark("bench-spark-sql", args.parallelism)
    began = time.perf_counter()
    shutil.rmtree(args.out, ignore_errors=True)
    files = [str(path) for path in common.input_files(args.inputs)]
    QUERIES[args.query](spark, files).write.json(args.out)
    job = time.perf_counter() - began
    spark.stop()
    common.emit_result(startup_s=startup, job_s=job)


if __name__ == "__main__":
    main()
