"""The Lightning bridge's parts.

What it adapts (``adaptation``), the connectors' choice of accelerator, strategy and precision
(``connector``), the registries, missing kernels."""
