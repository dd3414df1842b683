"""Continuous queries: sources, windows built from panes, stream tasks, checkpoints and the materialized view."""
