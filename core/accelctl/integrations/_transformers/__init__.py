"""The transformers bridge's parts.

The ``Trainer``'s device through its arguments, the callback that reads the run's figures."""
