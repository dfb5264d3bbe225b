"""The parts of :mod:`accelctl.launcher`, one idea per module (all private): :mod:`.failures`
(which process failed and why), :mod:`.options` (checked before anything starts), :mod:`.handoff`
(what the children receive), :mod:`.scripts` (``accelctl launch SCRIPT``), :mod:`.functions`
(``accelctl.launch(fn)``), :mod:`.child` (what runs in each process) and :mod:`.torch_logs`.

Nothing here imports torch at module level: the CLI imports :mod:`.scripts` and :mod:`.options`.
"""
