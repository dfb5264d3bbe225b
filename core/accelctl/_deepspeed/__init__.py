"""What the core knows of DeepSpeed without importing it.

The compiled ops a device gets and what building the host's takes, the set-ups that cannot run on a
plugin's device. Imports no other part of accelctl."""
