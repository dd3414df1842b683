"""Online aggregation: snapshots of a running job's reduce, with estimates of the final values.

- :mod:`hop.online.estimators`: estimates and confidence intervals from per-chunk contributions.
- :mod:`hop.online.state`: a reducer's per-attempt summaries of a built-in aggregate, merged into snapshots.
- :mod:`hop.online.snapshots`: writing a snapshot's files under ``OUT/_snapshots/``.
"""

from hop.online.estimators import Estimate, estimate_mean, estimate_total, t_quantile
from hop.online.state import SnapshotRow, SnapshotState

__all__ = ["Estimate", "SnapshotRow", "SnapshotState", "estimate_mean", "estimate_total", "t_quantile"]
