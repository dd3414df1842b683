"""Jobs written for the benchmark (run by path, like ``jobs/``)."""
