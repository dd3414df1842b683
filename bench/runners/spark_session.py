"""Starting a local Spark session the same way for both Spark contenders, and timing it.

``local[N]`` with the UI off, ``PYSPARK_PYTHON`` pinned to this interpreter, quiet logs, and as many SQL
shuffle partitions as RDD ones would get (Spark's default of 200 is meant for clusters). The start-up time
(SparkSession creation, which launches the JVM) is reported apart from the job time.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def start_spark(app: str, parallelism: int) -> tuple[Any, float]:
    """A SparkSession on ``local[parallelism]`` and the seconds its creation took."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    began = time.perf_counter()
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{parallelism}]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(2 * parallelism))
        .config("spark.log.level", "WARN")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark, time.perf_counter() - began
