"""The Ray bridge in this process, without a cluster.

The resources a node advertises (the helper and ``accelctl ray-resources``), what a worker takes and
hands to accelctl, the refusals, the ``TorchConfig``. Ray's worker context is not needed: the
placement takes the ranks as given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from cliharness import Cli
from fakeaccelerators import MetaAccelerator
from importgraph import CORE, imports_in, modules

import accelctl
from accelctl._kernels import setup as kernels
from accelctl.integrations._ray import placement as _ray_placement
from accelctl.integrations._ray.checkpoints import CheckpointMeta, Resume, resume_from, stage
from accelctl.integrations._ray.placement import (
    WorkerRanks,
    check_resources,
    current,
    on_device,
    place,
    shared_hosts,
)
from accelctl.integrations._ray.resources import ray_resources  # ray.py's, which needs no Ray

from fakedists import FakeSite

#: A hang guard for one fresh interpreter (it stops at the missing framework, before torch).
HANG_GUARD_S = 300


@pytest.fixture
def npu(fake_site: FakeSite) -> FakeSite:
    """An installed plugin ``npu`` with two devices and the backend gloo."""
    fake_site.install("accelctl-npu", {"npu": "fakeplugins.good:GoodAccelerator"})
    return fake_site


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process about to be placed: what placing sets is put back afterwards.

    (``monkeypatch.delenv`` of a variable that is not set records nothing, so what placing then
    sets in ``os.environ`` would outlive the test: ``ACCELCTL_ACCELERATOR=npu`` made the next
    test of the same worker look for an accelerator ``npu``.)"""
    names = (
        "ACCELCTL_ACCELERATOR", "ACCELCTL_DEVICES", "TORCHELASTIC_RESTART_COUNT",
        "ACCELERATE_TORCH_DEVICE", "ACCELCTL_CPU_FALLBACK",
    )  # fmt: skip
    for name in names:
        monkeypatch.setenv(name, "")  # recorded, so that the teardown restores or removes it
        monkeypatch.delenv(name)
    monkeypatch.setattr(_ray_placement, "_current", None)
    yield
    kernels.forget()  # what placing set up for the devices' kernels


def ranks(local_rank: int = 0, local_world_size: int = 2, world_size: int = 2) -> WorkerRanks:
    return WorkerRanks(local_rank, local_rank, local_world_size, world_size, node="10.0.0.7")


# -- what a node advertises ------------------------------------------------------------------


def test_a_node_advertises_its_devices_as_a_resource_named_after_their_torch_type() -> None:
    assert ray_resources(MetaAccelerator("gloo")) == {"meta": 2.0}


def test_the_cpu_counts_processes_and_advertises_nothing() -> None:
    assert ray_resources("cpu") == {}


def test_accelctl_ray_resources_prints_the_json_for_ray_start(cli: Cli, npu: FakeSite) -> None:
    named = cli("ray-resources", "--accelerator", "npu")
    assert (named.exit_code, json.loads(named.stdout), named.stderr) == (0, {"npu": 2}, "")
    # "auto" is what accelctl chooses here: ACCELCTL_ACCELERATOR first.
    auto = cli("ray-resources", env={"ACCELCTL_ACCELERATOR": "npu"})
    assert json.loads(auto.stdout) == {"npu": 2}
    cpu = cli("ray-resources", "-a", "cpu")
    assert (cpu.exit_code, cpu.stdout) == (0, "{}\n")
    assert "Ray's own CPU resource" in cpu.stderr
    unknown = cli("ray-resources", "-a", "nope")
    assert unknown.exit_code == 1 and unknown.stdout == ""
    assert "no accelerator named 'nope' is installed" in unknown.stderr


def test_the_command_needs_neither_ray_nor_torch_to_load() -> None:
    # The CLI reaches it through the entry-point group on any node, before `ray start`.
    module = "accelctl.integrations._ray.resources"
    source = modules()[module].read_text()
    imported = imports_in(source, module, False, set(modules()))
    assert not [name for name in imported if name.split(".")[0] in ("ray", "torch")]


def test_the_bridge_without_ray_names_the_extra_that_installs_it() -> None:
    code = """
import json, sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
try:
    import accelctl.integrations.ray
except ModuleNotFoundError as exc:
    print(json.dumps({"name": exc.name, "message": str(exc)}))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "name": "ray",
        "message": "accelctl.integrations.ray needs Ray Train (ray is missing): "
        "pip install 'accelctl[ray]' (in a clone of accelctl, from its folder: "
        "pip install -e '.[ray]')",
    }


# -- what a worker takes ---------------------------------------------------------------------


def test_each_worker_takes_the_device_of_its_local_rank_and_hands_it_to_accelctl(
    worker: None, npu: FakeSite
) -> None:
    placed = place("npu", ranks(local_rank=1), restarts=0)
    assert placed.accelerator.name == "npu" and placed.backend == "gloo"
    assert placed.device == torch.device("cpu")  # the fake plugin's devices
    assert current() is placed
    # What `accelctl launch` hands its children, so that a Trainer() there runs on it.
    assert (os.environ["ACCELCTL_ACCELERATOR"], os.environ["ACCELCTL_DEVICES"]) == ("npu", "2")
    assert os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
    selection = accelctl.resolve()
    assert (selection.accelerator.name, selection.parsed) == ("npu", [0, 1])


def test_the_plugins_setup_device_runs_at_placing_and_in_the_training_thread(
    worker: None,
) -> None:
    accelerator = MetaAccelerator("gloo")
    placed = place(accelerator, ranks(local_rank=1), restarts=2)
    assert (placed.device, placed.resource) == (torch.device("meta", 1), "meta")
    assert accelerator.set_up == ["meta:1"]
    assert "ACCELCTL_ACCELERATOR" not in os.environ  # an instance is passed to a Trainer itself
    assert os.environ["TORCHELASTIC_RESTART_COUNT"] == "2"  # fit resumes from last.ckpt
    with on_device():
        assert accelerator.set_up == ["meta:1", "meta:1"]


def test_a_run_whose_workers_do_not_each_ask_for_one_device_is_refused(worker: None) -> None:
    assert place("cpu", ranks(), 0).resource is None  # Ray's CPU resource schedules its workers
    check_resources({"CPU": 1, "meta": 1}, {"meta"})
    check_resources({"CPU": 1}, set())
    for asked, shown in (({"CPU": 1}, "0"), ({"CPU": 1, "meta": 0.5}, "0.5")):
        with pytest.raises(accelctl.ProcessSetupError) as raised:
            check_resources(asked, {"meta"})
        message = str(raised.value)
        assert f"the run asks for {shown} of it per worker" in message
        assert "advertise as the Ray resource 'meta' (accelctl ray-resources)" in message
        assert "resources_per_worker={..., 'meta': 1}" in message


def test_more_workers_on_a_node_than_devices_are_refused(worker: None) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as raised:
        place(MetaAccelerator("gloo"), ranks(local_rank=2, local_world_size=3, world_size=3), 0)
    message = str(raised.value)
    assert message.startswith("Ray Train worker 2 (node 10.0.0.7, local rank 2): ")
    assert "placed 3 workers of this run on this node, one device each" in message
    assert "metaacc" in message and "2" in message  # accelctl's DeviceSpecError: what is visible
    assert 'ray start --resources "$(accelctl ray-resources)"' in message
    assert "ScalingConfig(resources_per_worker={'meta': 1})" in message
    assert isinstance(raised.value.__cause__, accelctl.DeviceSpecError)


def test_a_node_without_the_plugin_refuses_its_worker(worker: None) -> None:
    with pytest.raises(accelctl.UnknownAcceleratorError) as raised:
        place("npu", ranks(), 0)
    message = str(raised.value)
    assert message.startswith("Ray Train worker 0 (node 10.0.0.7, local rank 0): ")
    assert "no accelerator named 'npu' is installed (installed: cpu" in message
    with pytest.raises(accelctl.ProcessSetupError, match="not a Ray Train worker placed"):
        current()


def test_a_node_where_the_plugin_is_unavailable_refuses_its_worker(
    worker: None, fake_site: FakeSite
) -> None:
    fake_site.install("accelctl-xla", {"xla": "fakeplugins.undetected:UndetectedAccelerator"})
    with pytest.raises(accelctl.AcceleratorUnavailableError, match=r"^Ray Train worker 0 "):
        place("xla", ranks(), 0)


def test_several_workers_on_an_accelerator_without_a_backend_are_refused(worker: None) -> None:
    with pytest.raises(accelctl.ProcessSetupError) as raised:
        place(MetaAccelerator(None), ranks(local_world_size=1, world_size=2), 0)
    assert "runs in a single process only" in str(raised.value)
    assert "Ray Train started 2 workers" in str(raised.value)
    assert "ScalingConfig(num_workers=1)" in str(raised.value)


# -- a kernel the device lacks -----------------------------------------------------------------

#: What torch raises where an ``*_overrideable`` operator has no kernel for the device.
TORCHS_CONVOLUTION_ERROR = (
    "convolution_overrideable not implemented. You are likely triggering this with tensor "
    "backend other than CPU/CUDA/MKLDNN"
)


def test_placing_a_worker_sets_up_the_kernels_of_its_device(worker: None) -> None:
    place(MetaAccelerator("gloo"), ranks(local_rank=1), restarts=0)
    done = kernels.setup_for("meta")
    assert done is not None and (done.accelerator, done.fallback) == ("metaacc", "off")


def test_a_missing_kernel_leaves_the_training_function_as_accelctls_error_alone(
    worker: None,
) -> None:
    """Ray logs a worker's error with its traceback: accelctl's, not torch's behind it."""
    place(MetaAccelerator("gloo"), ranks(local_rank=1), restarts=0)
    with pytest.raises(accelctl.MissingKernelError) as raised:
        with on_device():
            raise NotImplementedError(TORCHS_CONVOLUTION_ERROR)
    error = raised.value
    assert (error.op, error.device, error.accelerator) == ("aten::convolution", "meta:1", "metaacc")
    assert error.cpu_way == (
        "pass TorchConfig(\"cpu\") and leave 'meta' out of ScalingConfig(resources_per_worker=...)"
    )
    assert str(error).startswith("aten::convolution has no kernel for meta:1 (plugin metaacc): ")
    assert error.__cause__ is None and error.__suppress_context__


def test_the_debug_switch_keeps_torchs_error_behind_the_workers(
    worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELCTL_DEBUG", "1")
    place(MetaAccelerator("gloo"), ranks(), restarts=0)
    with pytest.raises(accelctl.MissingKernelError) as raised:
        with on_device():
            raise NotImplementedError(TORCHS_CONVOLUTION_ERROR)
    assert isinstance(raised.value.__cause__, NotImplementedError)


def test_a_training_functions_other_error_leaves_it_as_it_is(worker: None) -> None:
    place(MetaAccelerator("gloo"), ranks(), restarts=0)
    error = ValueError("the user's own")
    with pytest.raises(ValueError) as raised:
        with on_device():
            raise error
    assert raised.value is error


def test_the_driver_shows_a_workers_missing_kernel_as_accelctls_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ray's WorkerGroupError ends the script on the lowest rank's MissingKernelError line.

    As fit() raises it in the driver; other errors stay Ray's.
    """
    import ray.train

    from accelctl.integrations.ray import TorchConfig

    TorchConfig("npu")  # made in the driver: it shows the workers' missing kernels
    missing = {
        rank: accelctl.MissingKernelError(
            op="aten::convolution", device=f"openreg:{rank}", accelerator="privateuse1",
            cpu_way='pass TorchConfig("cpu")',
        )
        for rank in (1, 0)
    }  # fmt: skip
    failed = ray.train.WorkerGroupError("Traceback ... per worker", {**missing, 2: ValueError()})
    sys.excepthook(type(failed), failed, None)
    line = capsys.readouterr().err
    assert line == f"accelctl: {missing[0].for_command(sys.orig_argv)}\n"
    assert "openreg:0 (plugin privateuse1): to train on the CPU, pass TorchConfig(" in line
    assert "ACCELCTL_CPU_FALLBACK=1 " in line and "Traceback" not in line
    other = ray.train.WorkerGroupError("Traceback ... per worker", {0: ValueError("own")})
    sys.excepthook(type(other), other, None)
    assert "WorkerGroupError: Training failed due to worker errors" in capsys.readouterr().err


def test_the_drivers_cpu_fallback_switch_travels_with_the_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from accelctl.integrations.ray import TorchConfig

    assert TorchConfig("npu").cpu_fallback is False
    monkeypatch.setenv("ACCELCTL_CPU_FALLBACK", "1")
    assert TorchConfig("npu").to_dict()["cpu_fallback"] is True
    monkeypatch.setenv("ACCELCTL_CPU_FALLBACK", "maybe")
    with pytest.raises(accelctl.AccelctlError, match="ACCELCTL_CPU_FALLBACK"):
        TorchConfig("npu")


# -- TorchConfig and the helpers ---------------------------------------------------------------


def test_torch_config_is_rays_with_the_plugin_in_place_of_rays_backend_choice() -> None:
    import ray.train.torch
    from ray.train.torch.config import _TorchBackend

    from accelctl.integrations.ray import ADAPTATION, TorchConfig

    config = TorchConfig("npu", timeout_s=60)
    assert isinstance(config, ray.train.torch.TorchConfig)
    assert (config.accelerator, config.backend, config.timeout_s) == ("npu", None, 60)
    assert issubclass(config.backend_cls, _TorchBackend)
    assert config.train_func_context is on_device
    assert config.to_dict()["accelerator"] == "npu"
    assert ADAPTATION.refusal == ""  # Ray's internals that the bridge extends are there
    assert accelctl.integrations.ray.ray_resources is ray_resources


def test_torch_config_refuses_rays_backend_argument() -> None:
    from accelctl.integrations.ray import TorchConfig

    with pytest.raises(TypeError, match=r"the plugin.s choice here \(its distributed_backend"):
        TorchConfig("npu", backend="nccl")


def test_the_helpers_outside_a_placed_worker_say_where_they_belong(worker: None) -> None:
    from accelctl.integrations.ray import get_device, prepare_model

    with pytest.raises(accelctl.ProcessSetupError, match=r"torch_config=accelctl\.integrations"):
        get_device()
    with pytest.raises(accelctl.ProcessSetupError):
        prepare_model(torch.nn.Linear(1, 1))


def test_the_data_loader_wrapper_moves_every_batch_to_the_device() -> None:
    from accelctl.integrations.ray import _OnDevice

    loader = torch.utils.data.DataLoader(list(range(6)), batch_size=4)
    wrapped = _OnDevice(loader, torch.device("meta"))
    batches = list(wrapped)
    assert [batch.device.type for batch in batches] == ["meta", "meta"]
    assert len(wrapped) == 2 and wrapped.batch_size == 4 and wrapped.dataset is loader.dataset


def test_docs_name_every_public_name() -> None:
    import accelctl.integrations.ray as bridge

    docs = (CORE.parents[1] / "docs" / "ray.md").read_text()
    for name in bridge.__all__:
        assert f"`{name}" in docs, name


# -- the refusals the driver can make ----------------------------------------------------------


@pytest.mark.parametrize(
    ("accelerator", "backend", "suggested"),
    [
        ("openreg", "occl", "TorchConfig('openreg')"),
        ("hpu", "hccl", "TorchConfig('hpu')"),
        (MetaAccelerator("gloo"), "gloo", "TorchConfig(MetaAccelerator())"),
        ("auto", "no-such-backend", "TorchConfig('<accelerator>') (accelctl list names them)"),
    ],
)
def test_rays_backend_argument_is_refused_suggesting_the_accelerator_asked_for(
    accelerator: Any, backend: str, suggested: str
) -> None:
    from accelctl.integrations.ray import TorchConfig

    with pytest.raises(TypeError) as raised:
        TorchConfig(accelerator, backend=backend)
    message = str(raised.value)
    assert message.startswith(f"TorchConfig(backend={backend!r}) is the plugin's choice here")
    assert message.endswith(f"name the accelerator instead: {suggested}")


def test_rays_backend_argument_alone_suggests_the_installed_accelerator_with_that_backend(
    fake_site: FakeSite,
) -> None:
    from accelctl.integrations.ray import TorchConfig

    fake_site.install("accelctl-zpu", {"zpu": "fakeplugins.backends:UnknownBackend"})
    with pytest.raises(TypeError, match=r"instead: TorchConfig\('zpu'\)$"):
        TorchConfig(backend="zccl")


@pytest.mark.parametrize(
    ("arguments", "error", "shown"),
    [
        ({"accelerator": 3}, TypeError, "TorchConfig(accelerator=3): give a name or alias"),
        ({"accelerator": None}, TypeError, "not NoneType"),
        ({"accelerator": " "}, ValueError, "names no accelerator"),
        ({"init_method": "file"}, ValueError, "TorchConfig(init_method='file'): Ray takes"),
        ({"timeout_s": 0}, ValueError, "TorchConfig(timeout_s=0): the seconds"),
        ({"timeout_s": 1.5}, ValueError, "a positive whole number"),
        ({"report": "yes"}, TypeError, "TorchConfig(report='yes'): True or False"),
        ({"report_checkpoints": None}, TypeError, "TorchConfig(report_checkpoints=None)"),
    ],
)
def test_what_a_worker_would_refuse_is_refused_when_the_config_is_made(
    arguments: dict[str, Any], error: type[Exception], shown: str
) -> None:
    from accelctl.integrations.ray import TorchConfig

    with pytest.raises(error) as raised:
        TorchConfig(**arguments)
    assert shown in str(raised.value)


def test_the_config_carries_what_the_workers_report() -> None:
    from accelctl.integrations.ray import TorchConfig

    config = TorchConfig("npu", report_checkpoints=False)
    assert (config.report, config.report_checkpoints) == (True, False)
    assert config.to_dict()["report_checkpoints"] is False


# -- several Ray nodes on one host -------------------------------------------------------------


def test_several_nodes_of_one_host_that_overcount_its_devices_are_named(worker: None) -> None:
    crowded = WorkerRanks(3, 3, 4, 4, node="10.0.0.7", nodes_on_host=2)
    with pytest.raises(accelctl.ProcessSetupError) as raised:
        place(MetaAccelerator("gloo"), crowded, 0)
    message = str(raised.value)
    assert "2 Ray nodes run on this host (10.0.0.7)" in message
    assert "numbers the workers of one host together" in message
    assert "placed 4 workers of this run here, one device each" in message
    assert "on one of them, and no 'meta' on the others" in message


def test_a_warning_names_the_hosts_whose_nodes_each_advertise_the_devices() -> None:
    def node(address: str, alive: bool = True, **resources: float) -> dict[str, Any]:
        return {"NodeManagerAddress": address, "Alive": alive, "Resources": resources}

    nodes = [node("10.0.0.7", CPU=2, npu=2), node("10.0.0.7", npu=2), node("10.0.0.8", npu=2),
             node("10.0.0.8", alive=False, npu=2), node("10.0.0.9", CPU=4)]  # fmt: skip
    warning = shared_hosts(nodes, "npu")
    assert warning is not None
    assert "(10.0.0.7: 2 nodes advertising 2, 2)" in warning
    assert "10.0.0.8" not in warning  # its second node is dead
    assert shared_hosts(nodes[2:], "npu") is None
    assert shared_hosts(nodes, "CPU") is None  # a resource on one node of each host


# -- the Trainer's checkpoints as Ray's, and back ----------------------------------------------


class LocalCheckpoint:
    """What the bridge reads of a ``ray.train.Checkpoint`` in a folder: file system kind and path.

    Ray's own class, made without a Ray session.
    """

    def __init__(self, path: Path) -> None:
        import ray.train

        real = ray.train.Checkpoint.from_directory(str(path))
        self.filesystem, self.path = real.filesystem, real.path


def meta(restart: int = 0, step: int = 6) -> CheckpointMeta:
    return CheckpointMeta("ray-0123", restart, "last.ckpt", "run-0", epoch=1, step=step)


def test_a_checkpoint_is_laid_out_for_ray_by_links_with_what_it_is(tmp_path: Path) -> None:
    run = tmp_path / "checkpoints/run-0"
    (run / "last.shards/a1").mkdir(parents=True)
    (run / "last.ckpt").write_bytes(b"the loop state")
    (run / "last.shards/a1/0.distcp").write_bytes(b"a shard")
    (run / "best-epoch=0.ckpt").write_bytes(b"not this one")
    staged = stage(run / "last.ckpt", meta())
    assert staged.parent == run and staged.name.startswith(".ray-report-")
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*")) == [
        "accelctl.json", "last.ckpt", "last.shards", "last.shards/a1", "last.shards/a1/0.distcp"
    ]  # fmt: skip
    assert (staged / "last.ckpt").stat().st_ino == (run / "last.ckpt").stat().st_ino
    assert CheckpointMeta.read(staged) == meta()
    # The Trainer replaces last.ckpt by a rename: the staged one stays whole.
    (run / "new.tmp").write_bytes(b"the next state")
    os.replace(run / "new.tmp", run / "last.ckpt")
    assert (staged / "last.ckpt").read_bytes() == b"the loop state"


def test_rays_checkpoint_of_the_trainer_resumes_the_next_restart(tmp_path: Path) -> None:
    storage = tmp_path / "storage/checkpoint_0001"
    storage.mkdir(parents=True)
    (storage / "last.ckpt").write_bytes(b"state")
    (storage / "accelctl.json").write_text(meta(restart=2).to_json())
    # A new fit() of the run (no start yet): one more restart than the checkpoint's.
    assert resume_from(LocalCheckpoint(storage), starts=0) == Resume(3, storage / "last.ckpt")
    # A restart within a fit(): its own count where that is higher.
    assert resume_from(LocalCheckpoint(storage), starts=5).restarts == 5
    assert resume_from(None, starts=1) == Resume(1, None)


def test_a_checkpoint_that_is_not_the_trainers_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"a hand-written loop's")
    assert resume_from(LocalCheckpoint(tmp_path), starts=1) == Resume(1, None)
    (tmp_path / "accelctl.json").write_text(meta().to_json())  # its file is missing
    assert resume_from(LocalCheckpoint(tmp_path), starts=1) == Resume(1, None)


def test_the_run_id_is_one_per_ray_run_storage_and_name() -> None:
    from accelctl.integrations._ray.report import run_id

    class Context:
        def __init__(self, storage: str, name: str) -> None:
            self.storage, self.name = storage, name

        def get_experiment_name(self) -> str:
            return self.name

        def get_storage(self) -> Any:
            return type("Storage", (), {"storage_fs_path": self.storage})()

    first = run_id(Context("/shared/ray", "run1"))
    assert first == run_id(Context("/shared/ray", "run1")) and first.startswith("ray-")
    assert first != run_id(Context("/shared/ray", "run2"))
    assert first != run_id(Context("/other", "run1"))
