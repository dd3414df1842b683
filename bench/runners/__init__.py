"""Scripts the non-hop contenders run as subprocesses (``python -m bench.runners.NAME``); see each module."""
