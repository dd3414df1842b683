"""Pipelined against blocking when the shuffle crosses a network: worker hosts in network namespaces, links shaped.

    sudo python -m bench.network [--size 150MB] [--rates none,1gbit,100mbit] [--repeats 7] [--json PATH]

On loopback (``python -m bench``) the map output reaches a reducer for free, so there is nothing for pipelining to
hide and both modes cost the same CPU on the same two cores. On a cluster the map output of one host crosses a link
to the reducers of another. This benchmark builds that on this machine: a bridge in the root namespace holds the
coordinator, and each worker runs in its own network namespace (``ip netns``) joined to the bridge by a veth pair
whose two ends are shaped to ``--rates`` with a token bucket (``tc qdisc ... tbf``); ``none`` leaves the links
unshaped. A worker's pushes to its own reducers stay on its loopback, as on a real host. The heavy-reduce job
(``bench/jobs/heavy_reduce.py``, no combiner, 4 reducers, 2 workers of 1 map slot and 2 reduce slots: what
``hop run --reducers 4`` starts) runs pipelined and blocking, interleaved, ``--repeats`` times per rate; outputs must
be identical across modes and rates. It prints a table of median wall times and the pipelined/blocking ratio per
rate and writes JSON beside the other results.

It needs root (network namespaces, tc) and Linux; every namespace, link and process it made is removed on exit,
Ctrl-C and SIGTERM included (SIGKILLed, its processes die with it and the next run removes the namespaces).
The CPU is the same two cores whatever the link: only the shuffle's transfer time changes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import datasets
from bench.environment import REPO_ROOT, compile_project
from hop.client import Client
from hop.gen.cli import parse_size
from hop.lifetime import die_with_parent
from hop.loader import load_job_file
from hop.runner import build_spec, run_steps

HEAVY_REDUCE = REPO_ROOT / "bench" / "jobs" / "heavy_reduce.py"
BRIDGE = "hopbench0"
SUBNET = "10.77.0"
PREFIX = "hopbench"
JOB_TIMEOUT = 600.0
REGISTER_TIMEOUT = 30.0


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _shell(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"bench.network: {' '.join(command)} failed: {result.stderr.strip()}")


class EmulatedNetwork:
    """A bridge at ``SUBNET.1`` and ``hosts`` namespaces at ``SUBNET.2``... joined to it by veth pairs.

    ``shape(rate)`` sets a token bucket of ``rate`` (a tc rate such as ``100mbit``, or ``none``) on both ends of
    every link, so traffic between two hosts is limited on the way out of one and on the way into the other.
    """

    def __init__(self, hosts: int) -> None:
        self.hosts = hosts
        self.namespaces = [f"{PREFIX}-w{i}" for i in range(hosts)]
        self.addresses = [f"{SUBNET}.{i + 2}" for i in range(hosts)]
        self.gateway = f"{SUBNET}.1"

    def _ends(self, host: int) -> tuple[str, str]:
        return f"{PREFIX}{host}a", f"{PREFIX}{host}b"

    def __enter__(self) -> EmulatedNetwork:
        self.remove()  # leftovers of a run that was killed
        try:
            _ip("link", "add", BRIDGE, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", BRIDGE)
            _ip("link", "set", BRIDGE, "up")
            for host, namespace in enumerate(self.namespaces):
                outside, inside = self._ends(host)
                _ip("netns", "add", namespace)
                _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
                _ip("link", "set", outside, "master", BRIDGE, "up")
                _ip("link", "set", inside, "netns", namespace)
                _ip("-n", namespace, "addr", "add", f"{self.addresses[host]}/24", "dev", inside)
                _ip("-n", namespace, "link", "set", inside, "up")
                _ip("-n", namespace, "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        for host, namespace in enumerate(self.namespaces):
            subprocess.run(["ip", "link", "del", self._ends(host)[0]], capture_output=True)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)

    def bytes_sent(self) -> int:
        """Bytes the hosts have sent over their links so far (the bridge side's receive counters)."""
        return sum(
            int(Path(f"/sys/class/net/{self._ends(host)[0]}/statistics/rx_bytes").read_text())
            for host in range(self.hosts)
        )

    def shape(self, rate: str) -> None:
        for host, namespace in enumerate(self.namespaces):
            outside, inside = self._ends(host)
            for where, device in ((["tc"], outside), (["ip", "netns", "exec", namespace, "tc"], inside)):
                subprocess.run([*where, "qdisc", "del", "dev", device, "root"], capture_output=True)
                if rate != "none":
                    # A burst of 10 ms at the rate (at least 64 KB) and a queue of 50 ms: TCP sees the rate, not drops.
                    _shell(
                        [*where, "qdisc", "add", "dev", device, "root", "tbf", "rate", rate, "burst", "256kb"]
                        + ["latency", "50ms"]
                    )


@contextlib.contextmanager
def cluster_on(network: EmulatedNetwork, scratch: Path) -> Iterator[str]:
    """A coordinator on the bridge and one worker per namespace; yields the coordinator's address."""
    processes: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        log = open(scratch / "coordinator.log", "wb")  # noqa: SIM115 (closed below, after the processes end)
        logs.append(log)
        # die_with_parent: should this process be SIGKILLed, its cluster goes too (a polite stop runs the finally).
        coordinator = subprocess.Popen(
            [sys.executable, "-m", "hop", "coordinator", "--bind", f"tcp://{network.gateway}:*"],
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=die_with_parent,
        )
        processes.append(coordinator)
        assert coordinator.stdout is not None
        address = coordinator.stdout.readline().decode().strip()
        if not address.startswith("tcp://"):
            raise SystemExit(f"bench.network: the coordinator did not start (see {scratch / 'coordinator.log'})")
        for namespace, host in zip(network.namespaces, network.addresses, strict=True):
            log = open(scratch / f"{namespace}.log", "wb")  # noqa: SIM115 (closed below)
            logs.append(log)
            command = ["ip", "netns", "exec", namespace, sys.executable, "-m", "hop", "worker"]
            command += ["--coordinator", address, "--host", host, "--name", namespace]
            command += ["--map-slots", "1", "--reduce-slots", "2"]
            processes.append(
                subprocess.Popen(command, stdout=log, stderr=log, cwd=REPO_ROOT, preexec_fn=die_with_parent)
            )
        client = Client(address, timeout=10)
        try:
            deadline = time.monotonic() + REGISTER_TIMEOUT
            while len(client.workers()) < network.hosts:
                if time.monotonic() > deadline:
                    raise SystemExit(f"bench.network: workers did not register in {REGISTER_TIMEOUT:.0f} s ({scratch})")
                time.sleep(0.1)
        finally:
            client.close()
        yield address
    finally:
        for process in reversed(processes):  # workers first, then the coordinator
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in logs:
            log.close()


def run_once(network: EmulatedNetwork, address: str, source: Path, output: Path, mode: str) -> dict[str, Any]:
    client = Client(address, timeout=10)
    sent_before = network.bytes_sent()
    try:
        job = load_job_file(str(HEAVY_REDUCE))
        spec = build_spec(job, [str(source)], str(output), num_reduces=4, mode=mode, overwrite=True)
        started = time.perf_counter()
        report = run_steps(client, spec, progress=False, timeout=JOB_TIMEOUT)
        wall = time.perf_counter() - started
    finally:
        client.close()
    counters = report.get("counters", {})
    return {
        "wall_s": round(wall, 3),
        "link_mb": round((network.bytes_sent() - sent_before) / 1e6, 1),
        # Seconds after the last map committed until the last reducer had all its input: the transfer that
        # pipelining hides and blocking pays.
        "shuffle_after_maps_s": round(report["last_reduce_input_at"] - report["last_map_commit_at"], 3),
        "tail_s": round(report["end"] - report["last_map_commit_at"], 3),
        "map_cpu_s": counters.get("map_cpu_seconds"),
        "reduce_cpu_s": counters.get("reduce_cpu_seconds"),
        "parts": [path.read_bytes() for path in sorted(output.glob("part-*"))],
    }


def _row(rate: str, pipelined: list[dict[str, Any]], blocking: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and ranges of one rate's runs; ``paired_ratio_median``: the median of each repeat's own ratio (its two
    runs ran back to back, so a slow spell of the shared machine hits both)."""
    walls = {mode: [run["wall_s"] for run in runs] for mode, runs in (("pipelined", pipelined), ("blocking", blocking))}
    medians = {mode: statistics.median(values) for mode, values in walls.items()}
    paired = [p / b for p, b in zip(walls["pipelined"], walls["blocking"], strict=True)]
    return {
        "rate": rate,
        "pipelined_s": medians["pipelined"],
        "blocking_s": medians["blocking"],
        "ratio": round(medians["pipelined"] / medians["blocking"], 3),
        "paired_ratio_median": round(statistics.median(paired), 3),
        "pipelined_range_s": [min(walls["pipelined"]), max(walls["pipelined"])],
        "blocking_range_s": [min(walls["blocking"]), max(walls["blocking"])],
        **{
            f"{mode}_{figure}": statistics.median(run[figure] for run in runs)
            for mode, runs in (("pipelined", pipelined), ("blocking", blocking))
            for figure in ("shuffle_after_maps_s", "tail_s")
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("150MB"))
    parser.add_argument("--rates", default="none,1gbit,100mbit", help="tc rates per link, or none")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=REPO_ROOT / "bench" / "data")
    parser.add_argument("--json", default=str(REPO_ROOT / "bench" / "results" / "network.json"))
    args = parser.parse_args(argv)
    if platform.system() != "Linux" or os.geteuid() != 0 or shutil.which("tc") is None:
        print(
            "bench.network needs Linux, root and iproute2's ip and tc (network namespaces, tc qdisc)", file=sys.stderr
        )
        return 2
    # SIGTERM (kill, timeout) unwinds like Ctrl-C, so the cluster is stopped and the namespaces removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    compile_project()
    rates = [rate.strip() for rate in args.rates.split(",") if rate.strip()]
    text = datasets.text(args.data_dir, args.size)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {rate: {"pipelined": [], "blocking": []} for rate in rates}
    reference: list[bytes] | None = None
    with tempfile.TemporaryDirectory(prefix="hop-bench-network-") as scratch_name, EmulatedNetwork(2) as network:
        scratch = Path(scratch_name)
        with cluster_on(network, scratch) as address:
            for repeat in range(args.repeats):
                for rate in rates:
                    network.shape(rate)
                    modes = ("pipelined", "blocking") if repeat % 2 == 0 else ("blocking", "pipelined")
                    for mode in modes:  # interleaved, so machine noise hits both alike
                        run = run_once(network, address, text.path, scratch / "out", mode)
                        parts = run.pop("parts")
                        if reference is None:
                            reference = parts
                        elif parts != reference:
                            raise SystemExit(f"MISMATCH: {mode} at {rate} produced different output")
                        runs[rate][mode].append(run)
                        after = run["shuffle_after_maps_s"]
                        print(
                            f"  {rate:>8} {mode:>9}: {run['wall_s']:.2f} s, shuffle after maps {after:.2f} s,"
                            f" {run['link_mb']} MB over the links",
                            flush=True,
                        )
    rows = [_row(rate, runs[rate]["pipelined"], runs[rate]["blocking"]) for rate in rates]
    print(f"\nheavy reduce, {text.description}, 2 worker hosts, 4 reducers, medians of {args.repeats}")
    print("(shuffle after maps: from the last map's commit until the last reducer had all its input)")
    print(f"{'link':>8} {'pipelined':>10} {'blocking':>10} {'ratio':>6} {'paired':>7}   shuffle after maps p / b")
    for row in rows:
        print(
            f"{row['rate']:>8} {row['pipelined_s']:>9.2f}s {row['blocking_s']:>9.2f}s {row['ratio']:>6.3f}"
            f" {row['paired_ratio_median']:>7.3f}   {row['pipelined_shuffle_after_maps_s']:.2f} s /"
            f" {row['blocking_shuffle_after_maps_s']:.2f} s"
        )
    summary = {
        "command": f"python -m bench.network --size {args.size} --rates {','.join(rates)} --repeats {args.repeats}",
        "input": text.description,
        "rows": rows,
        "runs": runs,
        "outputs_identical": True,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
