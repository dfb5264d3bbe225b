"""Figures read back for people: the plugins' device stats, the metrics file a fit wrote.

Imports the training package (for the metrics file's name) and below."""
