"""Which input each map task reads: its *chunks*, in the order it reads them.

A chunk is a byte range of one input file (a compressed file is one chunk) and the unit online aggregation samples: a
reducer knows exactly which chunks its data covers, and estimates scale by the fraction of chunks seen (see
``hop.online``). Each chunk has a number (its id, unique in the job), a size in bytes and a *stratum*: the name the
job's ``input_stratum(path)`` gives its file ("" for every chunk when the job defines no strata).

- Plain mode (no snapshots, sequential order): the splits of ``hop.inputs.make_splits`` (about ``split_size`` bytes,
  as many as fill whole waves of the map slots), one chunk each; consecutive splits smaller than that are packed
  into map tasks of about that size (a directory of small files makes a few maps, not one per file, as Hadoop's
  CombineFileInputFormat and Spark SQL's file packing do: a map's fixed cost would dwarf a small file's bytes).
- Chunked mode (snapshots or ``--order random``): files are cut into chunks of ``chunk_size`` bytes, and the chunks are
  dealt to ``round(total / split_size)`` map tasks (rounded up to whole waves of map slots) as consecutive runs of
  the chunk list. With ``order="random"`` the list is first put in a seeded random order (stratified when the job
  has strata: see ``_random_order``), so the chunks read by any set of tasks at any moment are a random sample of
  the input, whichever tasks run first.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

from hop.inputs import Split, compressed_text_bytes, make_splits, split_size_for

__all__ = ["ORDERS", "Chunk", "plan_map_inputs"]

ORDERS = ("sequential", "random")


@dataclass(frozen=True)
class Chunk:
    """One chunk of input: ``id`` is unique in the job; ``size`` is in bytes (of a compressed file, the text it is
    taken to hold: ``hop.inputs.compressed_text_bytes``)."""

    id: int
    split: Split
    size: int
    stratum: str = ""

    def to_wire(self) -> list[object]:
        stamp = list(self.split.stamp) if self.split.stamp is not None else None
        return [self.id, self.split.path, self.split.start, self.split.length, stamp]


def _size(split: Split) -> int:
    if split.length >= 0:
        return split.length
    return compressed_text_bytes(split.path, os.path.getsize(split.path))  # (read whole: its text is its cost)


def _random_order(chunks: list[Chunk], rng: random.Random) -> list[Chunk]:
    """A seeded random order; with several strata a *stratified* one: each stratum shuffled, then interleaved so
    that every stretch of the order holds each stratum in proportion to its size (the stratum furthest behind its
    share comes next, ties broken at random). Any set of tasks then reads a proportional stratified random sample,
    which estimates per stratum more accurately than a sample whose share of each stratum varies by chance."""
    by_stratum: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        by_stratum.setdefault(chunk.stratum, []).append(chunk)
    for members in by_stratum.values():
        rng.shuffle(members)
    if len(by_stratum) == 1:
        return next(iter(by_stratum.values()))
    strata = list(by_stratum)
    taken = dict.fromkeys(strata, 0)
    order = []
    for _ in range(len(chunks)):
        open_strata = [s for s in strata if taken[s] < len(by_stratum[s])]
        behind = min((taken[s] + 1) / len(by_stratum[s]) for s in open_strata)
        candidates = [s for s in open_strata if (taken[s] + 1) / len(by_stratum[s]) <= behind + 1e-12]
        stratum = rng.choice(candidates)
        order.append(by_stratum[stratum][taken[stratum]])
        taken[stratum] += 1
    return order


def _packed(chunks: list[Chunk], target: int) -> list[list[Chunk]]:
    """Consecutive chunks dealt to ``round(total / target)`` tasks of about equal bytes: each goes to the task its
    middle byte falls in (a chunk of ``target`` bytes or more has a task of its own; tasks left empty are dropped).
    Filling each task up to ``target`` instead would leave a small last task: a wave with one slot busy."""
    total = sum(chunk.size for chunk in chunks)
    count = max(1, round(total / target))
    width = total / count
    tasks: list[list[Chunk]] = [[] for _ in range(count)]
    offset = 0
    for chunk in chunks:
        tasks[min(count - 1, int((offset + chunk.size / 2) // width))].append(chunk)
        offset += chunk.size
    return [task for task in tasks if task]


def plan_map_inputs(
    files: list[str],
    split_size: int,
    *,
    chunked: bool = False,
    chunk_size: int = 1 << 20,
    order: str = "sequential",
    seed: int = 0,
    strata: dict[str, str] | None = None,
    slots: int = 1,
    pack: bool = True,
    min_tasks: int = 1,
    whole_files: bool = False,
    per_file: bool = False,
) -> list[list[Chunk]]:
    """The chunks of every map task (see the module docstring); ``strata`` maps a file to its stratum; ``slots``
    is the number of map slots the job can use (the number of tasks is a multiple of it where the input allows,
    see ``hop.inputs.split_size_for``). Without ``pack``, every split is a task of its own, as under Hadoop and
    mrjob, where a mapper never reads two files (an mrjob job's ``mapper_final`` may report per file), and an empty
    file is a task too (whose ``mapper_init``/``mapper_final`` run, as Hadoop and mrjob run them). With ``pack``, an
    input of empty files only is one task of their empty splits, so that a job's ``setup``/``mapper_init``/
    ``mapper_final`` run once, as on Spark, which runs a partition for an input of no splits (none ran, and a
    ``mapper_final``'s pairs were missing from the output on hop's engine alone). In chunked mode the chunks are
    dealt to at least ``min_tasks`` tasks (where there are as many chunks). With ``whole_files``, every file is one
    split and one chunk, however large (an mrjob ``mapper_raw`` reads each file whole). With ``per_file`` (a later
    step run ``--blocking``, reading the part files of the step before), every file is one task of one split,
    uncut, an empty one too: the step has a map per partition of the step before, as a pipelined run's later step
    has (``hop.pipe``), so the maps' hooks run as often in either mode (in chunked mode, whose tasks are its
    sample's, only where the input is empty files)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if chunk_size <= 0:
        raise ValueError(f"chunk size must be positive, got {chunk_size}")
    strata = strata or {}
    if not chunked and order == "sequential":
        keep_empty = per_file or not pack
        splits = make_splits(files, split_size, slots, keep_empty=keep_empty, whole=whole_files, uncut=per_file)
        if not splits and files:  # (only empty files: one task reads them all, see above)
            splits = make_splits(files, split_size, slots, keep_empty=True, whole=whole_files)
            keep_empty = False
        chunks = [Chunk(i, split, _size(split), strata.get(split.path, "")) for i, split in enumerate(splits)]
        if keep_empty:
            return [[chunk] for chunk in chunks]
        if not any(chunk.size for chunk in chunks):
            return [chunks] if chunks else []
        return _packed(chunks, split_size_for(sum(chunk.size for chunk in chunks), split_size, slots))
    pieces = make_splits(files, min(chunk_size, split_size), whole=whole_files)
    if not pieces and files:  # (only empty files: a task of their empty chunks, or a task per file, as above)
        pieces = make_splits(files, split_size, keep_empty=True, whole=whole_files)
        chunks = [Chunk(i, split, 0, strata.get(split.path, "")) for i, split in enumerate(pieces)]
        return [[chunk] for chunk in chunks] if per_file or not pack else [chunks]
    chunks = [Chunk(i, split, _size(split), strata.get(split.path, "")) for i, split in enumerate(pieces)]
    if not chunks:
        return []
    if order == "random":
        chunks = _random_order(chunks, random.Random(seed))
    total = sum(chunk.size for chunk in chunks)
    tasks = max(1, min(len(chunks), max(min_tasks, round(total / split_size_for(total, split_size, slots)))))
    return [chunks[len(chunks) * t // tasks : len(chunks) * (t + 1) // tasks] for t in range(tasks)]
