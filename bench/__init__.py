"""The hop benchmark suite: hop against a plain serial loop, PySpark (RDD and SQL) and mrjob.

    python -m bench --size 150MB --repeats 3

Modules, one concern each:

- ``cli``: the command line; runs everything and prints/saves the results.
- ``workloads``: which job runs on which input for which contenders; ``datasets``: generating and caching
  inputs.
- ``contenders``: the command line of each contender and the extra figures it reports.
- ``measure``: wall time, process-tree CPU time and peak RSS of one subprocess.
- ``suite``: the interleaved repeats and the output verification; ``verify``: parsing and comparing outputs.
- ``stats``: raw runs and their min/median/max; ``targets``: the pass/fail goals; ``report``: table and JSON.
- ``runners``: the scripts the non-hop contenders run; ``jobs``: jobs written for the benchmark.

Inputs are cached in ``bench/data`` (git-ignored); results go to ``bench/results``.
"""
