"""The ``hop`` command's entry point: start the embedded cluster's interpreter before the command's own imports.

``hop run`` without ``--coordinator`` starts an embedded cluster (``hop.local_cluster``), whose launcher
(``hop.cluster_launch``) is a fresh interpreter that imports the coordinator's and worker's code. Started only once
the command has imported its own modules, loaded the job and checked the inputs, the two interpreters' start-ups
ran one after the other (about 0.2 s of wall time before a job could start, on a 2-core machine); started first,
they run side by side (about 0.1 s). The launcher cannot be told its options yet (how many workers, reduce slots,
where its socket goes: the command knows them only after parsing its arguments and loading the job), so it imports,
then waits on a pipe for them (``--config-fd``).

Contracts:

- :func:`main` starts a :class:`Prelaunch` only when the arguments look like ``hop run`` on an embedded cluster
  (:func:`wants_embedded_cluster`), and always ends it before returning: a launcher the command did not take is
  killed and reaped (it has created nothing yet: no socket, no directory, no worker).
- :func:`take` hands the launcher over once; ``hop.local_cluster.LocalCluster(prelaunched=...)`` then sends it its
  options and owns its process. A guess that was wrong costs only the launcher's start-up CPU, never correctness:
  whoever finds nothing to take starts a launcher as before.
- The launcher ends by itself if this process dies before sending its options (the pipe reaches end-of-file).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

from hop.lifetime import PARENT_VARIABLE

__all__ = ["Prelaunch", "main", "take", "wants_embedded_cluster"]

_ELSEWHERE_OPTIONS = ("--coordinator", "--engine", "--source", "--help")
"""``hop run`` options that mean no embedded cluster of hop's own (another cluster, Spark, a continuous job, help):
argparse accepts any unambiguous prefix of them, so prefixes count too."""

_pending: Prelaunch | None = None


class Prelaunch:
    """A launcher (``python -m hop.cluster_launch --config-fd``) that has started and waits for its options."""

    def __init__(self) -> None:
        config_read, self._config_write = os.pipe()
        self.report_read, report_write = os.pipe()
        # What LocalCluster gave its launcher: its own pid as the cluster's parent (the cluster ends when this
        # process does) and a fixed hash seed, which must be set when the interpreter starts.
        environment = {**os.environ, PARENT_VARIABLE: str(os.getpid()), "PYTHONHASHSEED": "0"}
        try:
            self.process: subprocess.Popen[bytes] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hop.cluster_launch",
                    "--config-fd",
                    str(config_read),
                    "--report-fd",
                    str(report_write),
                ],
                env=environment,
                pass_fds=(config_read, report_write),
            )
        except BaseException:
            for fd in (self._config_write, self.report_read):
                os.close(fd)
            raise
        finally:
            os.close(config_read)
            os.close(report_write)

    def configure(self, arguments: list[str]) -> None:
        """Send the launcher its options (``hop.cluster_launch``'s arguments but ``--report-fd``); once only."""
        with os.fdopen(self._config_write, "w") as config:
            self._config_write = -1
            config.write(json.dumps(arguments))

    def discard(self, timeout: float = 5.0) -> None:
        """End a launcher that was never configured: kill it and reap it."""
        if self._config_write >= 0:
            os.close(self._config_write)
            self._config_write = -1
        with contextlib.suppress(OSError):
            os.close(self.report_read)
        self.process.kill()
        self.process.wait(timeout=timeout)


def wants_embedded_cluster(argv: list[str]) -> bool:
    """Whether ``argv`` (the command's arguments) is ``hop run`` on an embedded cluster, as far as a scan can tell."""
    if argv[:1] != ["run"]:
        return False
    options = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    for option in options:
        name = option.split("=", 1)[0]
        if option == "-h" or (len(name) > 2 and any(known.startswith(name) for known in _ELSEWHERE_OPTIONS)):
            return False
    return True


def take() -> Prelaunch | None:
    """The launcher :func:`main` started, if any and not taken yet; the caller owns it from then on."""
    global _pending
    prelaunch, _pending = _pending, None
    return prelaunch


def main() -> int:
    """Run the ``hop`` command (``hop.cli.main``), with a launcher started first when it will want one."""
    global _pending
    if wants_embedded_cluster(sys.argv[1:]):
        _pending = Prelaunch()
    try:
        from hop.cli import main as cli_main  # the imports the launcher's start-up overlaps

        return cli_main()
    finally:
        leftover = take()
        if leftover is not None:
            leftover.discard()
