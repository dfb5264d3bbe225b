"""The Ray Train bridge's parts.

The Ray Train bridge's parts: resources and placement of the workers, their reports and
checkpoints."""
