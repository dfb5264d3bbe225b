"""accelctl plugin for Intel Gaudi (Habana) HPUs: an example of a third-party plugin.

Install it beside accelctl and the HPU becomes one more accelerator::

    pip install accelctl-hpu
    accelctl list                      # hpu: available, or why not
    accelctl validate hpu              # the conformance checks

or pass the class straight to a Trainer, without installing an entry point::

    from accelctl_hpu import HPUAccelerator
    trainer = accelctl.Trainer(accelerator=HPUAccelerator(), devices=4)

Importing this package is cheap: Habana's software and torch are imported inside the hooks.
"""

from __future__ import annotations

from .accelerator import HPUAccelerator, visible_modules

__all__ = ["HPUAccelerator", "visible_modules"]
