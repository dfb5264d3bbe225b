"""What torch is installed and how it was built, told without importing it; and importing it.

``import torch`` costs seconds, so :func:`read_torch_build` parses the literal assignments of the
generated ``torch/version.py`` with :mod:`ast` (never executing it), importing torch only as a
last resort. :func:`import_torch` is how accelctl imports torch: its backend autoload replaced by
accelctl's scan, which one malformed ``entry_points.txt`` cannot break.
"""

from ._base.torch_build import (
    TorchBuild,
    cudnn_version,
    loaded_torch,
    mps_built,
    read_torch_build,
    version_literals,
)
from ._host.isolation import AUTOLOAD_VARIABLE, import_torch, import_torch_alone, load_backends

__all__ = [
    "AUTOLOAD_VARIABLE",
    "TorchBuild",
    "cudnn_version",
    "import_torch",
    "import_torch_alone",
    "load_backends",
    "loaded_torch",
    "mps_built",
    "read_torch_build",
    "version_literals",
]
