"""The Ray Train bridge's parts.

Resources and placement of the workers, their reports and checkpoints."""
