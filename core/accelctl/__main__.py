"""``python -m accelctl`` runs the CLI (same as the ``accelctl`` console script)."""

from accelctl.cli import main

main()
