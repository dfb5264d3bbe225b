"""A plugin's ``distributed_backend`` that torch lacks for its devices is refused before any start.

A made-up ``"zccl"``, or ``"nccl"`` on devices that are not CUDA's, is refused by ``accelctl
launch``, :func:`accelctl.launch` and the Trainer before any process starts or joins a group, naming
the plugin and the backend: the check ``accelctl validate`` makes, from one core function, asked
once per process.

A vendor's own backend passes where its plugin has registered it by the end of ``detect()``, and
is refused where only ``setup_device`` registers it (too late: docs/writing-a-plugin.md).

The plugins are third-party fakes installed on a fake site (``fakeplugins.backends``), with CPU
devices; whatever would start a process (torchrun's runner, ``subprocess.Popen``, torch's
elastic launch, ``init_process_group``) is replaced by a recorder, so the tests observe that none
was reached.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch.distributed
import torch.distributed.launcher.api
import torch.distributed.run
from click.testing import CliRunner

import accelctl
from accelctl._base.problem import Problem
from accelctl._choice import distributed_backend as _distributed_backend
from accelctl.cli.main import cli

#: The plugin's name -> its declared backend, and what the refusal says about it.
BACKENDS = {
    "zcclacc": ("zccl", "is not a torch.distributed backend this torch knows"),
    "ncclacc": ("nccl", "does not support 'cpu' tensors"),
    "lateacc": ("lateccl", "is not a torch.distributed backend this torch knows"),
}
#: The plugin's name -> its class in tests/fixtures/fakeplugins/backends.py.
CLASSES = {
    "zcclacc": "UnknownBackend",
    "ncclacc": "NcclOnCpu",
    "lateacc": "RegistersInSetupDevice",
    "earlyacc": "RegistersInDetect",
}
TWO_RANKS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}  # fmt: skip


@pytest.fixture
def started(fake_site: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Install the plugins and record, instead of doing, every way a process could start; return it.

    Joining a group is recorded too.
    """
    for name, cls in CLASSES.items():
        fake_site.install(f"accelctl-{name}", {name: f"fakeplugins.backends:{cls}"})
    # The vendor backends the plugins register, forgotten by torch after the test.
    backend = torch.distributed.Backend
    tables = ("backend_list", "backend_capability", "backend_type_map", "_plugins",
              "default_device_backend_map")  # fmt: skip
    for table in tables:
        monkeypatch.setattr(backend, table, copy.copy(getattr(backend, table)))
    for name in ("EARLYCCL", "LATECCL"):
        monkeypatch.setattr(backend, name, None, raising=False)
        monkeypatch.delattr(backend, name)
    record: list[str] = []

    def recorder(what: str) -> Any:
        def record_call(*args: Any, **kwargs: Any) -> Any:
            record.append(what)
            raise AssertionError(f"{what} was reached")

        return record_call

    monkeypatch.setattr(torch.distributed.run, "run", recorder("torchrun"))
    monkeypatch.setattr(subprocess, "Popen", recorder("subprocess"))
    monkeypatch.setattr(torch.distributed.launcher.api, "elastic_launch", recorder("elastic"))
    monkeypatch.setattr(torch.distributed, "init_process_group", recorder("init_process_group"))
    monkeypatch.setattr(_distributed_backend, "_verdicts", {})
    return record


def _assert_names_plugin_and_backend(message: str, name: str, *, started: bool = False) -> None:
    """Assert ``message`` names the plugin, its backend, the fault and torch's backend.

    And what was started: nothing before a launch, else each running process refuses.
    """
    backend, problem = BACKENDS[name]
    assert f"accelerator {name!r} (plugin {name!r}, accelctl-{name} 1.0)" in message
    assert f"distributed_backend={backend!r}, which {problem}" in message
    assert "torch's backend for 'cpu' devices here is 'gloo'" in message
    each = "torchrun started 2 processes for this run, and each refuses here"
    assert (each in message, "none was started" in message) == (started, not started)
    assert f"`accelctl validate {name}` reports the same" in message


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_accelctl_launch_refuses_before_starting_a_process(
    started: list[str], tmp_path: Path, name: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    result = CliRunner().invoke(
        cli, ["launch", "--accelerator", name, "--devices", "2", str(script)]
    )
    assert result.exit_code == 1, result.output
    _assert_names_plugin_and_backend(result.output, name)
    assert started == []


def test_the_launch_function_refuses_before_starting_a_process(started: list[str]) -> None:
    with pytest.raises(accelctl.LaunchError) as caught:
        accelctl.launch(print, accelerator="zcclacc", devices=2)
    _assert_names_plugin_and_backend(str(caught.value), "zcclacc")
    assert started == []


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_the_trainer_refuses_under_a_launcher_before_joining_a_group(
    started: list[str], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    for key, value in TWO_RANKS.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(accelctl.ProcessSetupError) as caught:
        accelctl.Trainer(accelerator=name)
    # The launcher started this process and its peer: the message says so (issue 35).
    _assert_names_plugin_and_backend(str(caught.value), name, started=True)
    assert started == []


def test_the_trainer_alone_refuses_the_backend_before_suggesting_a_launch(
    started: list[str],
) -> None:
    # Suggesting `accelctl launch` would only lead to the same refusal there.
    with pytest.raises(accelctl.ProcessSetupError) as caught:
        accelctl.Trainer(accelerator="zcclacc", devices=2)
    _assert_names_plugin_and_backend(str(caught.value), "zcclacc")
    assert "accelctl launch" not in str(caught.value)


def test_one_device_needs_no_backend(started: list[str]) -> None:
    trainer = accelctl.Trainer(accelerator="zcclacc", devices=1)
    assert len(trainer.devices) == 1 and started == []


def test_torch_is_asked_once_per_process_for_a_backend_and_device_type(
    started: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, str]] = []
    real = _distributed_backend.backend_problem

    def counting(backend: str, device_type: str) -> Problem | None:
        asked.append((backend, device_type))
        return real(backend, device_type)

    monkeypatch.setattr(_distributed_backend, "backend_problem", counting)
    for key, value in TWO_RANKS.items():
        monkeypatch.setenv(key, value)
    for _ in range(3):
        with pytest.raises(accelctl.ProcessSetupError):
            accelctl.Trainer(accelerator="zcclacc")
    accelctl.Trainer(accelerator="cpu")  # gloo on the CPU: usable
    accelctl.Trainer(accelerator="cpu")
    # The refusal also asked which backends carry 'cpu' tensors (to name gloo): each once.
    assert asked[0] == ("zccl", "cpu") and ("gloo", "cpu") in asked
    assert len(asked) == len(set(asked))


def test_a_torch_without_distributed_is_a_gap_to_report_not_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from accelctl.capabilities import _backend_gap

    monkeypatch.setattr(_distributed_backend, "_verdicts", {})
    wrong = _distributed_backend.backend_problem("zccl", "cpu")
    assert wrong is not None and not wrong.skip
    assert str(wrong).startswith("is not a torch.distributed backend this torch knows")
    assert _backend_gap("zccl", "cpu") == f"the backend 'zccl' {wrong}"
    monkeypatch.setattr(torch.distributed, "is_available", lambda: False)
    why = "this torch build has no torch.distributed"
    assert _distributed_backend.backend_problem("zccl", "cpu") == Problem(why, skip=True)
    # The capability matrix reports the reason as a gap; a refusal lets it pass.
    assert _backend_gap("zccl", "cpu") == why
    refusal = _distributed_backend.named_backend_refusal(
        "zccl",
        "cpu",
        named_by="ddp_backend='zccl'",
        accelerator="cpu",
        leave_out="leave ddp_backend unset",
        started=_distributed_backend.NOTHING_STARTED,
    )
    assert refusal is None


def test_a_backend_registered_in_detect_passes_and_the_launch_starts(
    started: list[str], tmp_path: Path
) -> None:
    # As a vendor's extension registers its backend when detect() imports it.
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    result = CliRunner().invoke(
        cli, ["launch", "--accelerator", "earlyacc", "--devices", "2", str(script)]
    )
    assert "declares distributed_backend" not in result.output
    assert started == ["torchrun"]


def test_a_backend_registered_in_detect_passes_where_the_trainer_is_made(
    started: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under a launcher, the Trainer that refuses an unknown backend when it is made (above).
    for key, value in TWO_RANKS.items():
        monkeypatch.setenv(key, value)
    trainer = accelctl.Trainer(accelerator="earlyacc")
    assert (trainer.accelerator.name, str(trainer.device)) == ("earlyacc", "cpu:0")
    assert started == []
