"""The process group's backend through the Accelerate and transformers bridges, in this process.

The launcher's variables for rank 0 of 2, devices of type ``meta`` with a collective backend
registered for them here (``metaccl``, as a vendor's extension registers its own), and
``init_process_group`` replaced by a recorder, so that what Accelerate would join the group over is
seen, and a refusal is seen to come before it.

- A backend the user names (``InitProcessGroupKwargs(backend=...)``, ``ddp_backend``) that the
  device has is used; one it lacks is refused when the ``Accelerator`` / ``TrainingArguments``
  are made, naming torch's backend for the device (not torch's ``No backend type associated
  with device type`` in every rank).
- Accelerate passes a handler's ``"nccl"`` (its default) on as no backend named: on a device
  nccl cannot carry, the plugin's backend is used with a warning that says so.
- A plugin's declared ``distributed_backend`` that torch lacks is refused as the Trainer
  refuses it, saying that the launcher's processes each refuse.

The same on real openreg devices under ``accelctl launch``: ``test_openreg_backend_choice.py``.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

accelerate = pytest.importorskip("accelerate")
pytest.importorskip("transformers")

import torch.distributed  # noqa: E402
from accelerate.state import AcceleratorState, GradientState, PartialState  # noqa: E402
from accelerate.utils import InitProcessGroupKwargs  # noqa: E402
from fakeaccelerators import TWO_PROCESSES, MetaAccelerator  # noqa: E402

import accelctl  # noqa: E402
from accelctl._choice import distributed_backend as _distributed_backend  # noqa: E402
from accelctl.integrations.accelerate import Accelerator  # noqa: E402

#: Backends registered here for ``meta`` devices: the device's own, and another it has.
META_BACKENDS = ("metaccl", "metaccl2")


class GroupJoined(Exception):
    """Raised by the recorder in place of ``init_process_group``."""


@pytest.fixture
def joined(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Make this rank 0 of 2 with ``metaccl`` backends; record the backend a group is joined over.

    A launcher's variables; ``metaccl`` (torch's default for ``meta``) and ``metaccl2`` registered
    for meta devices; ``init_process_group`` records the backend it was asked for, then raises
    :class:`GroupJoined`. Yields the record.
    """
    for name, value in TWO_PROCESSES.items():
        monkeypatch.setenv(name, value)
    for name in ("ACCELCTL_ACCELERATOR", "ACCELCTL_DEVICES", "ACCELERATE_TORCH_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    backend = torch.distributed.Backend
    tables = ("backend_list", "backend_capability", "backend_type_map", "_plugins",
              "default_device_backend_map")  # fmt: skip
    for table in tables:
        monkeypatch.setattr(backend, table, copy.copy(getattr(backend, table)))
    for name in META_BACKENDS:
        backend.register_backend(name, lambda *args: None, devices=["meta"])
        monkeypatch.delattr(backend, name.upper())  # undone after the test: forgotten
    backend.default_device_backend_map["meta"] = "metaccl"
    monkeypatch.setattr(_distributed_backend, "_verdicts", {})
    record: list[str] = []

    def init_process_group(backend: str | None = None, **kwargs: Any) -> None:
        record.append(str(backend))
        raise GroupJoined(backend)

    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield record
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def _handler(backend: str) -> dict[str, Any]:
    return {"kwargs_handlers": [InitProcessGroupKwargs(backend=backend)]}


# -- Accelerate -----------------------------------------------------------------------------


def test_accelerate_refuses_a_named_backend_the_device_lacks(joined: list[str]) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as refused:
        Accelerator(MetaAccelerator("metaccl"), **_handler("gloo"))
    message = str(refused.value)
    assert message.startswith(
        "InitProcessGroupKwargs(backend='gloo') names the torch.distributed backend 'gloo' for "
        "accelerator 'metaacc', whose processes run on 'meta' devices, and 'gloo' does not "
        "support 'meta' tensors"
    )
    assert "torch's backends for 'meta' devices here are 'metaccl', 'metaccl2'" in message
    assert "the launcher started 2 processes for this run, and each refuses here" in message
    assert "name 'metaccl' there, or leave the backend out of InitProcessGroupKwargs" in message
    assert joined == [] and not PartialState._shared_state  # before Accelerate's state


def test_accelerate_uses_a_named_backend_the_device_has(joined: list[str]) -> None:
    with pytest.raises(GroupJoined):
        Accelerator(MetaAccelerator("metaccl"), **_handler("metaccl2"))
    assert joined == ["metaccl2"]


def test_accelerates_default_nccl_is_the_plugins_backend_with_a_warning(
    joined: list[str],
) -> None:
    # InitProcessGroupKwargs(backend="nccl") and InitProcessGroupKwargs(timeout=...) are one
    # object to Accelerate, which passes neither backend on: said, not silent.
    for handler in (
        InitProcessGroupKwargs(backend="nccl"),
        InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=60)),
    ):
        AcceleratorState._reset_state(reset_partial_state=True)
        with (
            pytest.warns(UserWarning) as warned,
            pytest.raises(GroupJoined),
        ):
            Accelerator(MetaAccelerator("metaccl"), kwargs_handlers=[handler])
        (message,) = [str(w.message) for w in warned if "InitProcessGroupKwargs" in str(w.message)]
        assert message.startswith(
            "InitProcessGroupKwargs(backend='nccl') is Accelerate's default backend, which "
            "Accelerate passes on as no backend named, and 'nccl' does not support 'meta' tensors"
        )
        assert "join their group over 'metaccl'" in message
        assert "Name backend='metaccl' (or backend=None)" in message
        assert warned[0].filename == __file__  # the user's line
    assert joined == ["metaccl", "metaccl"]


def test_accelerate_refuses_a_plugins_backend_torch_lacks(joined: list[str]) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as refused:
        Accelerator(MetaAccelerator("zccl"))
    message = str(refused.value)
    assert "(plugin 'metaacc', class MetaAccelerator, given as an object) declares " in message
    assert "distributed_backend='zccl', which is not a torch.distributed backend" in message
    assert "torch's backends for 'meta' devices here are 'metaccl', 'metaccl2'" in message
    assert "the launcher started 2 processes for this run, and each refuses here" in message
    assert joined == []


def test_accelerate_on_cpus_refuses_a_named_backend_the_cpu_lacks(joined: list[str]) -> None:
    # Accelerate's own CPU set-up: it would fail with its own ValueError, naming no plugin.
    with pytest.raises(accelctl.ProcessSetupError) as refused:
        Accelerator("cpu", **_handler("metaccl"))
    message = str(refused.value)
    assert "'metaccl' does not support 'cpu' tensors" in message
    assert "torch's backend for 'cpu' devices here is 'gloo'" in message
    assert joined == []


# -- transformers ---------------------------------------------------------------------------


def _arguments(tmp_path: Path, **kwargs: Any) -> Any:
    from accelctl.integrations.transformers import TrainingArguments

    return TrainingArguments(str(tmp_path / "out"), report_to=[], **kwargs)


def test_transformers_refuses_a_ddp_backend_the_device_lacks(
    joined: list[str], tmp_path: Path
) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as refused:
        _arguments(tmp_path, accelerator=MetaAccelerator("metaccl"), ddp_backend="gloo")
    message = str(refused.value)
    assert message.startswith(
        "ddp_backend='gloo' names the torch.distributed backend 'gloo' for accelerator "
        "'metaacc', whose processes run on 'meta' devices, and 'gloo' does not support 'meta'"
    )
    assert "torch's backends for 'meta' devices here are 'metaccl', 'metaccl2'" in message
    assert "the launcher started 2 processes for this run, and each refuses here" in message
    assert "name 'metaccl' there, or leave ddp_backend unset" in message
    assert joined == [] and not PartialState._shared_state


def test_transformers_uses_a_ddp_backend_the_device_has(joined: list[str], tmp_path: Path) -> None:
    with pytest.raises(GroupJoined):
        _arguments(tmp_path, accelerator=MetaAccelerator("metaccl"), ddp_backend="metaccl2")
    assert joined == ["metaccl2"]


def test_transformers_on_cpus_refuses_nccl(joined: list[str], tmp_path: Path) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as refused:
        _arguments(tmp_path, accelerator="cpu", ddp_backend="nccl")
    message = str(refused.value)
    assert "ddp_backend='nccl' names the torch.distributed backend 'nccl'" in message
    assert "torch's backend for 'cpu' devices here is 'gloo'" in message
    assert joined == []
