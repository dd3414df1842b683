"""hop: a pipelined MapReduce engine after the Hadoop Online Prototype.

Public API for job authors: :class:`Job` and :class:`Step`. Layering, lowest first:

- ``shuffle`` (a sibling package): keys order, run and spill formats, the map output buffer, merges, the reduce-side
  run store and the push transport.
- ``hop.job``, ``hop.inputs``, ``hop.jobspec``: what a job is and what it reads.
- ``hop.tasks``, ``hop.taskproc``: map and reduce attempts inside task processes.
- ``hop.scheduler`` (I/O-free bookkeeping), ``hop.coordinator``, ``hop.worker``: the cluster processes;
  ``hop.cluster_launch`` starts an embedded cluster's in one interpreter.
- ``hop.client``, ``hop.local_cluster``, ``hop.runner``, ``hop.cli``: how users submit jobs.
- ``hop.planning`` (input chunks and their order), ``hop.online`` (snapshots and estimates), ``hop.pipe``
  (job-to-job pipelining): built on the above.

``Job`` and ``Step`` are imported on first use (``from hop import Job`` as before): importing the package itself
imports nothing else, so the ``hop`` command (``hop.prelaunch``, a submodule) starts its embedded cluster's launcher
before ``hop.job``'s imports (the shuffle, ZeroMQ, msgpack: 0.13-0.24 s on a loaded 2-core machine), and Ctrl-C in
that time is the command's to handle.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hop.job import Job, Step

__all__ = ["Job", "Step"]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    if name in __all__:
        from hop import job

        return getattr(job, name)
    raise AttributeError(f"module 'hop' has no attribute {name!r}")
