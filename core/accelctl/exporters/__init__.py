"""Device figures where people already watch them.

Each exporter is a module of its own, built on an optional library (an extra of accelctl), imported
only when asked for:

- :mod:`accelctl.exporters.prometheus`: the figures of :func:`accelctl.watch_stats` as Prometheus
  metrics over HTTP (``accelctl stats --prometheus PORT``; extra ``accelctl[prometheus]``).

The Trainer's own figures (``metrics.jsonl``) are drawn by :mod:`accelctl.plotting`
(``accelctl plot``); transformers' ``Trainer`` logs the device's figures through
:class:`accelctl.integrations.transformers.DeviceStatsCallback` (docs/monitoring.md).
"""
