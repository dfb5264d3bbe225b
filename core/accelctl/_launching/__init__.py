"""The parts of :mod:`accelctl.launcher`, one idea per module (all private).

Nothing here imports torch at module level: the CLI imports :mod:`.scripts` and :mod:`.options`.
"""
