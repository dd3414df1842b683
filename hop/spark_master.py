"""Whether a standalone Spark master (``--spark-master spark://HOST:PORT``) can be reached, asked before Spark starts.

Spark's standalone client retries a master it cannot reach for about a minute (three registration attempts 20 s
apart), printing a Java stack trace per attempt, and then fails with "All masters are unresponsive! Giving up." and
a py4j error that names neither the address nor what to do: 77 s and ~200 lines for ``spark://127.0.0.1:1``.

:func:`unreachable_master` connects to the master's port first (each master of a ``spark://H1:P1,H2:P2`` list, the
way Spark's high-availability URLs name them), for at most :data:`CONNECT_SECONDS` each, and says why none answered.
A port that takes the connection is taken for the master: what listens there is Spark's to find out. Other masters
(``local[N]``, ``yarn``, ``k8s://...``) are not checked.

:func:`spark_master_url`, ``--spark-master``'s type, refuses a URL of a form Spark does not take
(:func:`malformed_master`) as bad usage, before Spark starts: Spark refused ``bogus://x`` or ``local[0]`` only from
its JVM, with a Java stack trace above an error that named neither the URL nor what is wrong with it (``Java gateway
process exited before sending its port number``), exit code 3; a continuous job ran to its end without a view.
"""

from __future__ import annotations

import argparse
import re
import socket

__all__ = [
    "CONNECT_SECONDS",
    "DEFAULT_PORT",
    "LOCAL_MASTER",
    "malformed_master",
    "master_addresses",
    "spark_master_url",
    "unreachable_master",
]

CONNECT_SECONDS = 5.0
"""How long a connection to one master may take: a refused one fails at once, a dropped one (a firewall, a host that
is down) in this long."""

DEFAULT_PORT = 7077
"""A standalone master's port unless started with another (Spark's default), named in the messages; a URL must
still give it: Spark refuses ``spark://HOST`` as an invalid master URL."""


LOCAL_MASTER = re.compile(r"local(?:\[(?P<threads>[0-9]+|\*)(?:\s*,\s*[0-9]+)?\])?")
"""The local masters Spark takes (``SparkContext``'s ``local``, ``local[N]``, ``local[*]``, ``local[N, FAILURES]``),
the threads as ``threads``; matched whole."""
LOCAL_CLUSTER_MASTER = re.compile(r"local-cluster\[\s*[0-9]+\s*,\s*[0-9]+\s*,\s*[0-9]+\s*]")
MASTER_FORMS = "local, local[N], local[*], spark://HOST:PORT, yarn or k8s://URL"


def malformed_master(master: str, given: str | None = None) -> str | None:
    """Why Spark would refuse ``master`` as it starts (a form it does not take, a local master of no thread), with
    the forms it takes; None for a URL of a form it takes (a ``spark://`` one is checked by
    :func:`master_addresses`). ``given`` is how the user gave it, which the reason names (default
    ``--spark-master MASTER``; ``--spark-conf spark.master=MASTER`` names it too)."""
    local = LOCAL_MASTER.fullmatch(master)
    if local is not None:
        if local.group("threads") is not None and local.group("threads").strip("0") == "":
            return (
                f"{given or f'--spark-master {master}'}: a local master runs at least one thread (local[1], or "
                "local[*]: a core each)"
            )
        return None
    if master.startswith("spark://") or master == "yarn" or master.startswith("k8s://"):
        return None
    if LOCAL_CLUSTER_MASTER.fullmatch(master):
        return None
    return f"{given or f'--spark-master {master!r}'} is not a Spark master URL: give {MASTER_FORMS}"


def master_addresses(master: str, given: str | None = None) -> list[tuple[str, int]] | None:
    """The ``(host, port)`` of every master a ``spark://`` URL names (``spark://[::1]:7077`` too); None for a master
    of another kind. Raises ValueError for a ``spark://`` URL without a port number for each master, which Spark
    would refuse only once its JVM had started, with a stack trace (naming ``given``, as :func:`malformed_master`
    does)."""
    if not master.startswith("spark://"):
        return None
    addresses = []
    for part in master[len("spark://") :].split(","):
        host, _, port = part.strip().rpartition(":")
        if host.startswith("[") and host.endswith("]"):  # an IPv6 address: [::1]:7077
            host = host[1:-1]
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"{given or f'--spark-master {master}'}: {part.strip()!r} is not HOST:PORT; a standalone master's "
                f"URL names the port of every master (spark://HOST:{DEFAULT_PORT}, or spark://HOST1:PORT1,HOST2:PORT2)"
            )
        addresses.append((host, int(port)))
    return addresses


def spark_master_url(text: str) -> str:
    """``--spark-master``'s argparse type: ``text`` itself, refused (exit 2) if it is no master URL Spark takes
    (:func:`malformed_master`) or a ``spark://`` URL is malformed."""
    malformed = malformed_master(text)
    if malformed is not None:
        raise argparse.ArgumentTypeError(malformed)
    try:
        master_addresses(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _connect_error(host: str, port: int, timeout: float) -> str | None:
    """Why a TCP connection to ``host:port`` did not open within ``timeout`` seconds; None if it did."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.gaierror as error:
        return f"{host} does not resolve: {error.strerror}"
    except ConnectionRefusedError:
        return f"{host}:{port} refused the connection: nothing listens there"
    except TimeoutError:
        return f"{host}:{port} did not answer within {timeout:g} s (a host that is down, or a firewall)"
    except OSError as error:
        return f"{host}:{port}: {error.strerror or error}"


def unreachable_master(master: str, timeout: float = CONNECT_SECONDS) -> str | None:
    """Why Spark could not reach the standalone master ``master``, with what to do; None when one of its masters
    took a connection, or when ``master`` is no ``spark://`` URL. Raises ValueError as :func:`master_addresses`."""
    addresses = master_addresses(master)
    if not addresses:
        return None
    reasons = []
    for host, port in addresses:
        reason = _connect_error(host, port, timeout)
        if reason is None:
            return None
        reasons.append(reason)
    return (
        f"the Spark master {master} could not be reached ({'; '.join(reasons)}): start it (sbin/start-master.sh "
        f"on its host), or give --spark-master the URL its log and web UI show (spark://HOST:{DEFAULT_PORT}); "
        "--spark-master local[N] runs Spark on this host without one"
    )
