"""The transformers bridge's parts.

The transformers bridge's parts: the ``Trainer``'s device through its arguments, the callback
that reads the run's figures."""
