"""Bridges from accelctl plugins to training frameworks.

- :mod:`.lightning`: Lightning's ``Trainer`` and ``Fabric`` on any accelctl
  accelerator (extra ``accelctl[lightning]``, which installs Lightning);
- :mod:`.accelerate`: HF Accelerate's ``Accelerator`` on any accelctl
  accelerator (extra ``accelctl[accelerate]``, which installs Accelerate);
- :mod:`.transformers`: transformers' own ``Trainer`` on any accelctl
  accelerator, through its ``TrainingArguments`` (extra ``accelctl[transformers]``);
- :mod:`.ray`: Ray Train's ``TorchTrainer`` on any accelctl accelerator,
  through its ``TorchConfig`` (extra ``accelctl[ray]``);
- :mod:`.deepspeed`: DeepSpeed's engine on any accelctl accelerator,
  through DeepSpeed's ``set_accelerator`` (extra ``accelctl[deepspeed]``).

Each module imports its framework on import; nothing in the core imports them (a test walks the
core's imports: tests/core/test_dependencies.py). They adapt the frameworks' internals for the
versions they are tested with (:mod:`._shared.versions`, the extras' pins). They are part of the
``accelctl`` distribution, released with the core, so they may use its private modules (the
registry, the rule ``"auto"`` applies to devices, the settings reader; docs/concepts.md section
4a lists them) rather than copies.
"""
