"""The Lightning bridge's parts.

The Lightning bridge's parts: what it adapts (``adaptation``), the connectors' choice of
accelerator, strategy and precision (``connector``), the registries, missing kernels."""
