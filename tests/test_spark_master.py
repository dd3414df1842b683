"""``hop.spark_master``: the URLs of standalone Spark masters, and why one cannot be reached (no Spark needed)."""

from __future__ import annotations

import argparse
import socket

import pytest

from hop.spark_master import master_addresses, spark_master_url, unreachable_master


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
