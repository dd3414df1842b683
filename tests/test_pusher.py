"""The worker's shuffle server (``shuffle.pusher.SpillPusher``) keeps the counts of unsent spills that maps' flow
control asks for after every spill as they change; here they are checked, after every step of random sequences of
what a worker does (spills registered, pushed in pieces, acknowledged, committed, failed, trimmed, reducers
replaced), against a recount of the queues, with real ZeroMQ reducers taking the runs."""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path

import pytest
import zmq

from shuffle import pusher as pusher_module
from shuffle.keys import order_tag
from shuffle.pusher import SpillPusher
from shuffle.runs import encode_run
from shuffle.spill import write_spill

PARTITIONS = 2
JOB = "job-1"


def _recount(pusher: SpillPusher, map_index: int, attempt: int) -> int:
    """What ``unsent`` says, counted afresh from the queues (a reducer not yet running counts every spill)."""
    job = pusher._jobs[JOB]
    if len(job.reducers) < job.num_partitions:
        return sum((s.map_index, s.attempt) == (map_index, attempt) for s in job.spills)
    return len(
        {
            s.seq
            for r in job.reducers.values()
            for s in (*r.queue, *r.in_flight)
            if (s.map_index, s.attempt) == (map_index, attempt)
        }
    )


def _recount_total(pusher: SpillPusher) -> int:
    job = pusher._jobs[JOB]
    return len({(s.map_index, s.attempt, s.seq) for r in job.reducers.values() for s in (*r.queue, *r.in_flight)})


@pytest.mark.parametrize(("mode", "seed"), [(mode, seed) for mode in ("pipelined", "blocking") for seed in range(3)])
def test_unsent_counts_follow_every_step_a_worker_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, seed: int
) -> None:
    monkeypatch.setattr(pusher_module, "PIECE_BYTES", 24)  # (runs of several pieces: each piece holds its spill)
    chooser = random.Random(seed)
    context = zmq.Context()
    pusher = SpillPusher(context)
    reducers: dict[int, zmq.Socket] = {}
    names = itertools.count()
    seqs: dict[tuple[int, int], int] = {}
    attempts = {0: 0, 1: 0, 2: 0}

    def start_reducer(partition: int) -> None:
        old = reducers.pop(partition, None)
        if old is not None:
            old.close(linger=0)
        router = context.socket(zmq.ROUTER)
        address = f"inproc://reducer-{seed}-{next(names)}"
        router.bind(address)
        reducers[partition] = router
        pusher.set_reducer(JOB, partition, next(names), address)

    def acknowledge(router: zmq.Socket, most: int) -> None:
        for _ in range(most):
            if not router.poll(0):
                return
            sender, _, _ = router.recv_multipart()
            router.send_multipart([sender, b"0"])

    try:
        pusher.register_job(JOB, mode, PARTITIONS)
        for step in range(600):
            action = chooser.choices(
                ["spill", "pump", "ack", "commit", "fail", "trim", "reducer"], [30, 25, 25, 5, 3, 2, 3 if step else 0]
            )[0]
            map_index = chooser.randrange(3)
            key = (map_index, attempts[map_index])
            if action == "spill" or step == 0:
                seq = seqs.get(key, 0)
                seqs[key] = seq + 1
                words = sorted(chooser.choices(["a", "bb", "ccc", "dddd"], k=chooser.randrange(1, 12)))
                runs = [(encode_run(words, [1] * len(words)), len(words), order_tag(words))] * PARTITIONS
                path = tmp_path / f"{map_index}-{key[1]}-{seq}.spill"
                write_spill(path, runs)
                pusher.add_spill(JOB, map_index, key[1], seq, str(path))
                if len(reducers) < PARTITIONS and chooser.random() < 0.2:
                    start_reducer(len(reducers))
            elif action == "pump":
                pusher.pump(budget=chooser.randrange(1, 8))
            elif action == "ack" and reducers:
                acknowledge(reducers[chooser.choice(list(reducers))], chooser.randrange(1, 6))
            elif action == "commit":
                pusher.commit(JOB, map_index, key[1])
            elif action == "fail":
                pusher.fail(JOB, map_index, key[1], keep_below=chooser.choice([None, seqs.get(key, 0) // 2]))
                attempts[map_index] += 1
            elif action == "trim" and seqs.get(key):
                pusher.trim(JOB, map_index, key[1], chooser.randrange(seqs[key]))
            elif action == "reducer" and reducers:
                start_reducer(chooser.randrange(len(reducers)))
            for counted in seqs:
                assert pusher.unsent(JOB, *counted) == _recount(pusher, *counted), (step, action, counted)
            assert pusher.unsent_total() == _recount_total(pusher), (step, action)
        # Everything pushed and acknowledged in the end (committing all, for blocking mode): nothing unsent.
        while len(reducers) < PARTITIONS:
            start_reducer(len(reducers))
        for map_index, attempt in seqs:
            pusher.commit(JOB, map_index, attempt)
        for _ in range(10_000):
            pusher.pump()
            for router in reducers.values():
                acknowledge(router, 64)
            if not pusher.pending():
                break
        assert pusher.pending() == 0
        assert pusher.unsent_total() == 0
        assert all(pusher.unsent(JOB, *counted) == 0 for counted in seqs)
    finally:
        pusher.close()
        for router in reducers.values():
            router.close(linger=0)
        context.term()


def test_an_older_reduce_attempts_address_is_ignored(tmp_path: Path) -> None:
    """``set_reducer`` took whatever address came last: one of an older attempt of the partition, arriving after the
    newer one's, replaced it, and the runs went to the ended attempt's port while the live one waited. An older
    attempt is now ignored (the spill goes to the newer one), and a newer one still replaces the one before."""
    context = zmq.Context()
    pusher = SpillPusher(context)
    routers: dict[int, zmq.Socket] = {}

    def reducer(attempt: int) -> str:
        routers[attempt] = context.socket(zmq.ROUTER)
        address = f"inproc://older-reducer-{attempt}"
        routers[attempt].bind(address)
        return address

    def run_reaches(attempt: int, seconds: float) -> bool:
        """Whether a run reaches the reduce attempt ``attempt`` within ``seconds`` of pumping (it is acknowledged)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            pusher.pump()
            if routers[attempt].poll(10):
                sender, _, _ = routers[attempt].recv_multipart()
                routers[attempt].send_multipart([sender, b"0"])
                return True
        return False

    try:
        pusher.register_job(JOB, "pipelined", 1)
        path = tmp_path / "0-0-0.spill"
        write_spill(path, [(encode_run(["a"], [1]), 1, order_tag(["a"]))])
        pusher.add_spill(JOB, 0, 0, 0, str(path))
        pusher.set_reducer(JOB, 0, 2, reducer(2))
        pusher.set_reducer(JOB, 0, 1, reducer(1))  # (attempt 1's address, late)
        assert not run_reaches(1, 0.5), "the run went to the older attempt"
        assert run_reaches(2, 10)
        assert pusher._jobs[JOB].reducers[0].attempt == 2
        pusher.set_reducer(JOB, 0, 3, reducer(3))
        assert run_reaches(3, 10), "a newer attempt gets every eligible spill again"
    finally:
        for router in routers.values():
            router.close(linger=0)
        pusher.close()
        context.term()
