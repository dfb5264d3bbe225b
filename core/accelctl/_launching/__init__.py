"""The parts of :mod:`accelctl.launcher`, one idea per module (all private).

- :mod:`.failures`: which launched process failed and why (:class:`RankFailure`, read from
  torchrun's error files) and the error a failed launch raises (:class:`LaunchFailedError`);
- :mod:`.options`: the launch options checked before anything starts (machines, processes);
- :mod:`.handoff`: what the children receive from the launcher: the selection
  (``ACCELCTL_ACCELERATOR``, ``ACCELCTL_DEVICES``), their share of the CPU cores, the
  ``accelctl launch`` command line that hands a selection to a script;
- :mod:`.scripts`: ``accelctl launch SCRIPT``, through torchrun (or one child process);
- :mod:`.functions`: ``accelctl.launch(fn)``, through torch's elastic launch API;
- :mod:`.child`: what runs inside each launched process (dying with the launcher, the script or
  function).
- :mod:`.torch_logs`: torch's launcher logs silenced while a launch runs (the failure is
  reported in one line).

Nothing here imports torch at module level: the CLI imports :mod:`.scripts` and :mod:`.options`
on its start-up path.
"""
