"""The parts :class:`accelctl.Trainer` is built from, one idea per module.

``fit`` (one call of ``Trainer.fit`` as an object, which uses the others), precision, processes,
data, model, figures, checkpoint, best, timeouts, hangs, requeue, rng, metrics_log, progress.
Nothing here is imported by ``import accelctl``; torch is imported inside functions where it can
be."""
