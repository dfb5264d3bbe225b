"""accelctl's benchmark suite: what accelctl costs on the start-up path of every training script.

Sections (each a module with ``run(repeats, quick) -> dict``):

- :mod:`bench.startup`: ``accelctl list`` / ``resolve`` against bare Python, the floor of a
  pluggy + click CLI (:mod:`bench.floor`), ``import torch`` and Lightning's own listing;
- :mod:`bench.scaling`: the same with 0 to 1000 extra plugin distributions installed
  (:mod:`bench.fakeplugins`), and how many plugins each command imports;
- :mod:`bench.dispatch`: microseconds per hook call through a handle against a direct call;
- ``bench.trainer_overhead``: the Trainer against a hand-written loop, when that module is there.

Run ``python -m bench`` (``--quick`` to check that it works); see ``docs/performance.md``.
"""
