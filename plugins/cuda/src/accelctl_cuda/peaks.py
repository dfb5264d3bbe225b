"""Peak FLOPs and memory bandwidth of NVIDIA data-centre GPUs, from NVIDIA's datasheets.

**Source and rule.** Each figure is the datasheet's, for the board named: tensor-core figures
*without* structured sparsity (the datasheets print the sparse figure, twice the dense one, with
an asterisk; the dense one is what a training step can reach), ``float32`` the non-tensor-core
figure, at the boost clock. A GPU not in the table, a MIG instance (a slice of a GPU) and AMD GPUs
get None: unknown, never a guess from clocks and core counts, whose per-clock throughput differs
by architecture and data type. The table is looked up by the name NVML (or torch, where CUDA is in
use) gives the device: ``"NVIDIA H100 80GB HBM3"``, ``"NVIDIA A100-SXM4-40GB"``, ``"Tesla T4"``.
"""

from __future__ import annotations

import re

import accelctl

_T = 1e12  # tera
_G = 1e9  # giga


def _peak(
    board: str, bandwidth_gb_s: float, float32: float, **tensor_tflops: float
) -> accelctl.DevicePeak:
    return accelctl.DevicePeak(
        flops={"float32": float32 * _T, **{k: v * _T for k, v in tensor_tflops.items()}},
        memory_bandwidth_bytes_per_second=bandwidth_gb_s * _G,
        source=f"NVIDIA {board} datasheet (dense, boost clock)",
    )


#: (the words the device's name must contain, its peak), the most specific first: the first whose
#: words are all in the name wins.
TABLE: tuple[tuple[frozenset[str], accelctl.DevicePeak], ...] = tuple(
    (frozenset(words.split()), peak)
    for words, peak in (
        (
            "H200 NVL",
            _peak("H200 NVL", 4800, 60, tf32=417.5, bfloat16=835.5, float16=835.5, float8=1671),
        ),
        (
            "H200",
            _peak("H200 SXM", 4800, 67, tf32=494.5, bfloat16=989.5, float16=989.5, float8=1979),
        ),
        (
            "H100 NVL",
            _peak("H100 NVL", 3900, 60, tf32=417.5, bfloat16=835.5, float16=835.5, float8=1671),
        ),
        (
            "H100 PCIE",
            _peak("H100 PCIe", 2000, 51, tf32=378, bfloat16=756, float16=756, float8=1513),
        ),
        (
            "H100",
            _peak("H100 SXM", 3350, 67, tf32=494.5, bfloat16=989.5, float16=989.5, float8=1979),
        ),
        ("A100 SXM4 80GB", _peak("A100 80GB SXM", 2039, 19.5, tf32=156, bfloat16=312, float16=312)),
        ("A100 80GB", _peak("A100 80GB PCIe", 1935, 19.5, tf32=156, bfloat16=312, float16=312)),
        ("A100", _peak("A100 40GB", 1555, 19.5, tf32=156, bfloat16=312, float16=312)),
        ("L40S", _peak("L40S", 864, 91.6, tf32=183, bfloat16=362.05, float16=362.05, float8=733)),
        ("L4", _peak("L4", 300, 30.3, tf32=60, bfloat16=121, float16=121, float8=242.5)),
        ("A10", _peak("A10", 600, 31.2, tf32=62.5, bfloat16=125, float16=125)),
        ("V100 PCIE", _peak("V100 PCIe", 900, 14, float16=112)),
        ("V100", _peak("V100 SXM2", 900, 15.7, float16=125)),
        ("T4", _peak("T4", 320, 8.1, float16=65)),
    )
)


def peak_of(name: str) -> accelctl.DevicePeak | None:
    """The datasheet peak of the GPU called ``name``; None for one the table does not know."""
    words = set(re.split(r"[\s\-_]+", name.upper()))
    for needed, peak in TABLE:
        if needed <= words:
            return peak
    return None
