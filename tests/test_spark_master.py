"""``hop.spark_master``: the URLs of standalone Spark masters, and why one cannot be reached (no Spark needed)."""

from __future__ import annotations

import argparse
import os
import re
import socket

import pytest

from hop.spark_master import malformed_master, master_addresses, spark_master_url, unreachable_master


def test_a_spark_url_names_every_master_of_it() -> None:
    assert master_addresses("spark://h1:7077,h2:7078") == [("h1", 7077), ("h2", 7078)]
    assert master_addresses("spark://[::1]:7077") == [("::1", 7077)]
    assert master_addresses("local[2]") is None and master_addresses("yarn") is None


@pytest.mark.parametrize("master", ["spark://h1", "spark://h1:70x7", "spark://:7077", "spark://h1:7077,h2"])
def test_a_spark_url_without_a_port_for_each_master_is_refused(master: str) -> None:
    """Spark itself refuses such a URL only once its JVM has started ("Invalid master URL", with a stack trace)."""
    with pytest.raises(argparse.ArgumentTypeError, match="is not HOST:PORT"):
        spark_master_url(master)


def test_a_master_is_unreachable_only_when_none_of_its_addresses_takes_a_connection() -> None:
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))
        up, down = listening.getsockname()[1], closed.getsockname()[1]
        assert unreachable_master(f"spark://127.0.0.1:{down},127.0.0.1:{up}") is None
        why = unreachable_master(f"spark://127.0.0.1:{down}", timeout=2)
    assert why is not None and why.startswith(
        f"the Spark master spark://127.0.0.1:{down} could not be reached (127.0.0.1:{down} refused the connection"
    )
    assert unreachable_master("local[*]") is None


@pytest.mark.parametrize("master", ["bogus://x", "localhost:7077", "local[0]", "local[x]", "yarn-client", "k8s:h"])
def test_a_master_url_spark_does_not_take_is_refused_as_bad_usage(master: str) -> None:
    """Spark refused such a URL only from its JVM, exit code 3, with a Java stack trace above an error that named
    neither the URL nor what is wrong with it ("Java gateway process exited before sending its port number")."""
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(master)):
        spark_master_url(master)
    assert malformed_master(master) is not None


@pytest.mark.parametrize(
    ("master", "threads"),
    [("local", 1), ("local[3]", 3), ("local[*]", os.cpu_count()), ("local[2, 4]", 2), ("local-cluster[2,1,1024]", 1)],
)
def test_every_local_master_spark_takes_is_taken_with_its_threads(master: str, threads: int) -> None:
    """A map task per thread, as hop's engine has one per map slot (``local[2, 4]``, with spaces as Spark takes it,
    counted 1)."""
    from hop.spark_engine import _local_cores

    assert spark_master_url(master) == master and _local_cores(master) == threads


def test_the_other_masters_spark_takes_are_taken() -> None:
    for master in ("spark://h1:7077", "yarn", "k8s://https://h1:6443"):
        assert malformed_master(master) is None and spark_master_url(master) == master
