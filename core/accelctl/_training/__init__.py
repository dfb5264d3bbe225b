"""The parts :class:`accelctl.Trainer` is built from, one idea per module (precision, processes,
data, model, figures, checkpoint, timeouts, metrics_log, progress, ...). Nothing here is imported
by ``import accelctl``; torch is imported inside functions where it can be.
"""
