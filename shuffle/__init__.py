"""The shuffle: how map output becomes reduce input.

Layering (each module one concern, lowest first):

- ``keys``: the total order over msgpack-able keys and the cheap "native order is safe" check.
- ``codec``: msgpack as records use it (ints of any size).
- ``runs``: the byte format of a sorted run (msgpack blocks of keys and values, flat or grouped by key), reading and
  writing.
- ``spill``: spill files, one sorted run per partition plus an index, as the map writes them.
- ``buffer``: the map-side output buffer that combines in a hash map and cuts spills.
- ``merge``: merging sorted runs and grouping them by key for combine and reduce.
- ``pieces``: the reduce side of runs sent in pieces, put back together (in memory, or in a file for a large run).
- ``store``: the reduce-side store of runs per map attempt (tentative until committed), with external merge.
- ``fold``: the reduce-side store for built-in aggregates, folding committed runs into a hash map as they complete.
- ``flow``: map-side adaptive flow control (hold spills while the shuffle has a backlog, merge them).
- ``pusher``: the worker's shuffle server, pushing runs to reducers in pieces with per-reducer credits.
"""

from shuffle.buffer import MapOutputBuffer
from shuffle.flow import FlowController, merge_spills
from shuffle.fold import FoldingRunStore
from shuffle.keys import KeyOrder, order_tag, total_order_key
from shuffle.merge import group_sorted, merge_runs
from shuffle.pusher import SpillPusher
from shuffle.runs import RunWriter, encode_run, iter_run, iter_run_file
from shuffle.spill import SpillFile, SpillIndexEntry, write_spill
from shuffle.store import RunStore

__all__ = [
    "FlowController",
    "FoldingRunStore",
    "SpillPusher",
    "merge_spills",
    "KeyOrder",
    "MapOutputBuffer",
    "RunStore",
    "RunWriter",
    "SpillFile",
    "SpillIndexEntry",
    "encode_run",
    "group_sorted",
    "iter_run",
    "iter_run_file",
    "merge_runs",
    "order_tag",
    "total_order_key",
    "write_spill",
]
