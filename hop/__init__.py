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
"""

from hop.job import Job, Step

__all__ = ["Job", "Step"]
__version__ = "0.1.0"
