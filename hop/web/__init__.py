"""The live web view: jobs, task progress, snapshots with estimates and intervals, final results, stopping a job
(either kind), and a continuous job's windows (latest result, a key's value per window, the C2 scoreboard, recent
windows).

:class:`hop.web.server.WebServer` serves :func:`hop.web.app.make_app` for one coordinator; the page's data comes
from ``hop.web.source``. Served with ``monitor=`` (``hop monitor``) it also has the cluster monitor's dashboard
(``/monitor``: cluster -> rack -> host drill-down, live charts, jobs, alerts, faults, the C2 scoreboard), its JSON
API and ``/metrics`` for Prometheus. Front-end assets, including the vendored Chart.js, are in ``static/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hop.web.app import make_app
    from hop.web.server import WebServer

__all__ = ["WebServer", "make_app"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the web framework takes ~0.15 s to import, and ``hop.web.cli`` (part of every ``hop``
    # command's parser) lives in this package.
    if name == "make_app":
        from hop.web.app import make_app

        return make_app
    if name == "WebServer":
        from hop.web.server import WebServer

        return WebServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
