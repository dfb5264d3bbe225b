"""The parts :class:`accelctl.Trainer` is built from, one idea per module.

- :mod:`.precision`: the ``precision`` argument, ``torch.autocast`` and gradient scaling;
- :mod:`.processes`: the launcher's environment (torchrun's variables), this process's rank and
  device, the checks for several devices, ``torch.distributed`` set-up;
- :mod:`.data`: sharding a ``DataLoader`` across processes, moving batches to the device;
- :mod:`.model`: what ``fit`` asks of a model, and ``training_step`` as DDP's forward;
- :mod:`.figures`: the loss, throughput and validation figures, agreed across processes;
- :mod:`.checkpoint`: checkpoints, written atomically, and resuming exactly from one;
- :mod:`.timeouts`: the collectives' timeout and explaining one that expired;
- :mod:`.metrics_log`: ``<root_dir>/metrics.jsonl``;
- :mod:`.progress`: the progress bar on a terminal.

Nothing here is imported by ``import accelctl``; modules import torch inside their functions
where they can, so the Trainer's own import stays cheap.
"""
