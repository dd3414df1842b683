"""The cluster monitor (HOP's demo): every worker samples its host and the engine, a continuous job aggregates them.

- :mod:`monitoring.sampler`: ``HostSampler`` (host or process-tree metrics, one call per second per worker) and the
  names of the engine metrics workers send alongside;
- :mod:`monitoring.prometheus`: ``render`` builds the ``/metrics`` page (Prometheus text exposition) from the latest
  samples, the monitoring query's latest windows and the alerts.

This package imports nothing on import: workers import only the sampler, and ``prometheus_client`` is loaded only
where ``/metrics`` is served.
"""
