"""The live web view: jobs, task progress, snapshots with estimates and intervals, final results.

:class:`hop.web.server.WebServer` serves :func:`hop.web.app.make_app` for one coordinator; the page's data comes
from ``hop.web.source``. Front-end assets, including the vendored Chart.js, are in ``static/``.
"""

from hop.web.app import make_app
from hop.web.server import WebServer

__all__ = ["WebServer", "make_app"]
