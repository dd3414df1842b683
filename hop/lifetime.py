"""How long the processes of an embedded cluster live: no longer than the process that started them.

``hop.local_cluster.LocalCluster`` puts its own pid in ``HOP_EMBEDDED_PARENT_PID`` for the coordinator and workers it
starts; they call :func:`orphaned` in their loops and exit when their parent is gone (killed without a chance to
stop them), so a killed ``hop run`` leaves no processes behind. Task processes watch their worker the same way.
"""

from __future__ import annotations

import os

__all__ = ["PARENT_VARIABLE", "orphaned"]

PARENT_VARIABLE = "HOP_EMBEDDED_PARENT_PID"


def orphaned() -> bool:
    """Whether this process belongs to an embedded cluster whose parent is gone."""
    parent = os.environ.get(PARENT_VARIABLE)
    return parent is not None and os.getppid() != int(parent)
