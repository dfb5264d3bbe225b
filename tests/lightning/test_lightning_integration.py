"""accelctl.integrations.lightning: Lightning's Trainer and Fabric on accelctl plugins.

Real training throughout: Lightning's own Trainer, Fabric and DDP launcher, accelctl's real cpu
plugin and class-based test plugins installed as fake distributions (their devices are CPUs).
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anotherrelease import META_ACCELERATOR, refused_import, run_scenario
from bridgepatching import assert_enabled_and_undone

lightning = pytest.importorskip("lightning")

import torch  # noqa: E402
from lightning.fabric.accelerators import ACCELERATOR_REGISTRY as FABRIC_REGISTRY  # noqa: E402
from lightning.fabric.strategies import DDPStrategy as FabricDDPStrategy  # noqa: E402
from lightning.pytorch.accelerators import AcceleratorRegistry as TRAINER_REGISTRY  # noqa: E402
from lightning.pytorch.callbacks import DeviceStatsMonitor  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from lightning.pytorch.plugins.precision import MixedPrecision  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy  # noqa: E402

import accelctl  # noqa: E402
from accelctl.integrations._lightning import connector as _lightning_connector  # noqa: E402
from accelctl.integrations._lightning.strategy import OnStrategy  # noqa: E402
from accelctl.integrations.lightning import (  # noqa: E402
    ADAPTATION,
    LightningAccelerator,
    Registration,
    enable,
    register_all,
)

HERE = Path(__file__).parents[1] / "integrations"  # the helper modules and run scripts
sys.path.insert(0, str(HERE))  # tinymodel.py is a helper module, not a package
from tinymodel import TinyRegression, quiet_trainer_options, tiny_loader  # noqa: E402


class MetaAccelerator(accelctl.Accelerator):
    """Devices of another type than the CPU, as a real NPU or HPU would have (never run)."""

    name = "metaacc"
    device_type = "meta"

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 1


@pytest.fixture(autouse=True)
def _restore_lightning_registries() -> Iterator[None]:
    """register_all() writes to Lightning's process-wide registries: put them back after."""
    saved = [(registry, dict(registry)) for registry in (TRAINER_REGISTRY, FABRIC_REGISTRY)]
    yield
    for registry, content in saved:
        registry.clear()
        registry.update(content)


def test_enable_records_every_patch_and_undo_puts_lightnings_own_back() -> None:
    # Every internal the bridge declares is patched, but the one name it only reads.
    patched = [i.path for i in ADAPTATION.internals if i.name != "_FSDP_ALIASES"]
    assert len(patched) == 13
    assert_enabled_and_undone(enable, _lightning_connector.PATCHES, patched)
    assert _lightning_connector.is_active()


@pytest.fixture
def testnpu(fake_site: Any) -> Any:
    """The class-based test plugin ``testnpu``, installed as a distribution; its module."""
    fake_site.install("accelctl-testnpu", {"testnpu": "fakeplugins.testnpu:TestNPU"})
    import fakeplugins.testnpu

    return fakeplugins.testnpu


def _fit(accelerator: Any, epochs: int = 3, **options: Any) -> tuple[Any, TinyRegression]:
    settings: dict[str, Any] = {**quiet_trainer_options(), "max_epochs": epochs, **options}
    trainer = lightning.Trainer(accelerator=accelerator, **settings)
    model = TinyRegression()
    trainer.fit(model, tiny_loader())
    return trainer, model


def _assert_trained(model: TinyRegression, steps: int) -> None:
    assert len(model.losses) == steps
    first, last = model.losses[:4], model.losses[-4:]
    assert sum(last) < 0.5 * sum(first), model.losses


# -- the instance form ----------------------------------------------------------------------


def _spy(calls: list[str], hook: str, method: Any) -> Any:
    """``method`` that also records its hook's name in ``calls``."""

    def spied(*args: Any, **kwargs: Any) -> Any:
        calls.append(hook)
        return method(*args, **kwargs)

    return spied


def test_trainer_trains_on_the_cpu_plugin_passed_as_an_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    accelerator = LightningAccelerator("cpu")
    calls: list[str] = []
    handle = accelerator.accelctl_handle()
    for hook in ("detect", "auto_device_count", "parse_devices", "get_parallel_devices"):
        monkeypatch.setattr(handle, hook, _spy(calls, hook, getattr(handle, hook)))
    monkeypatch.setattr(handle, "device_stats", _spy(calls, "device_stats", handle.device_stats))
    trainer, model = _fit(
        accelerator,
        devices="auto",
        logger=CSVLogger(tmp_path, name="run", version=0),
        callbacks=[DeviceStatsMonitor()],
        log_every_n_steps=1,
    )

    _assert_trained(model, steps=3 * 4)
    assert trainer.accelerator is accelerator
    assert trainer.strategy.root_device == torch.device("cpu")
    assert trainer.num_devices == 1  # the plugin's auto_device_count() for devices="auto"
    for hook in ("detect", "auto_device_count", "parse_devices", "get_parallel_devices"):
        assert hook in calls, (hook, calls)
    assert calls.count("device_stats") >= 2 * 12  # batch start and end, every step

    # Lightning logged the plugin's own figures (its key names, not Lightning's CPU ones).
    with open(tmp_path / "run" / "version_0" / "metrics.csv") as stream:
        columns = next(csv.reader(stream))
    assert "DeviceStatsMonitor.on_train_batch_start/memory_total_bytes" in columns
    assert not [c for c in columns if "cpu_vm_percent" in c]


def test_an_accelctl_accelerator_instance_works_without_an_entry_point() -> None:
    accelerator = LightningAccelerator(MetaAccelerator())
    assert accelerator.name() == "metaacc"
    assert type(accelerator).is_available() is True
    assert type(accelerator).parse_devices("auto") == [0]
    assert type(accelerator).get_parallel_devices([0]) == [torch.device("meta", 0)]
    assert accelerator.get_device_stats(0) == {}


class MetaPair(MetaAccelerator):
    """Two ``meta`` devices and no distributed backend, as torch_openreg has."""

    name = "metapair"

    def auto_device_count(self) -> int:
        return 2


def test_strategy_auto_puts_one_device_on_the_plugins_device_not_cpu() -> None:
    # Item 4: Lightning's own rule gives an accelerator it does not know the device "cpu".
    bound = LightningAccelerator.bind(MetaAccelerator())
    bound.register_accelerators(TRAINER_REGISTRY)
    bound.register_accelerators(FABRIC_REGISTRY)
    for accelerator in (bound(), "metaacc"):
        trainer = lightning.Trainer(accelerator=accelerator, devices=1, **quiet_trainer_options())
        assert type(trainer.strategy) is SingleDeviceStrategy
        assert trainer.strategy.root_device == torch.device("meta", 0)
        fabric = lightning.Fabric(accelerator=accelerator, devices=1)
        assert fabric.device == torch.device("meta", 0)
    # An explicit index reaches the second visible device.
    trainer = lightning.Trainer(
        accelerator=LightningAccelerator(MetaPair()), devices=[1], **quiet_trainer_options()
    )
    assert trainer.strategy.root_device == torch.device("meta", 1)


def test_lightnings_own_accelerators_keep_lightnings_choice() -> None:
    # The adaptation is for accelctl's accelerators only.
    trainer = lightning.Trainer(accelerator="cpu", devices=1, **quiet_trainer_options())
    assert trainer.strategy.root_device == torch.device("cpu")
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, precision="bf16-mixed", **quiet_trainer_options()
    )
    assert trainer.precision_plugin.device == "cpu"


def test_devices_auto_is_one_device_without_a_distributed_backend() -> None:
    # accelctl's rule for devices="auto" (docs/concepts.md), as Lightning sees it.
    pair = LightningAccelerator(MetaPair())
    assert type(pair).auto_device_count() == 1
    trainer = lightning.Trainer(accelerator=pair, devices="auto", **quiet_trainer_options())
    assert trainer.num_devices == 1 and trainer.strategy.root_device == torch.device("meta", 0)


def test_devices_auto_is_every_device_with_a_distributed_backend(testnpu: Any) -> None:
    accelerator = LightningAccelerator("testnpu")
    assert type(accelerator).auto_device_count() == 2
    trainer = lightning.Trainer(accelerator=accelerator, devices="auto", **quiet_trainer_options())
    assert trainer.num_devices == 2


@pytest.mark.parametrize(
    "options",
    [{"devices": 2}, {"devices": "0,1"}, {"devices": -1}],
    ids=["two", "indices", "all"],
)
def test_several_devices_without_a_backend_are_refused_when_the_trainer_is_made(
    options: dict[str, Any],
) -> None:
    # Item 5: refused by accelctl, not by torch in every rank.
    with pytest.raises(accelctl.ProcessSetupError) as info:
        lightning.Trainer(accelerator=LightningAccelerator(MetaPair()), **options)
    message = str(info.value)
    assert "'metapair' runs in a single process only" in message
    assert "distributed_backend is None" in message and "devices=1" in message
    with pytest.raises(accelctl.ProcessSetupError):
        lightning.Fabric(accelerator=LightningAccelerator(MetaPair()), **options)


@pytest.mark.parametrize(
    "options",
    [
        {"devices": 1, "strategy": "ddp"},
        {"devices": 1, "strategy": "ddp_spawn"},
        {"devices": 1, "strategy": DDPStrategy()},
        {"devices": 1, "num_nodes": 2},
    ],
    ids=["ddp", "ddp_spawn", "ddp-instance", "two-nodes"],
)
def test_torch_distributed_without_a_backend_is_refused_when_the_trainer_is_made(
    options: dict[str, Any],
) -> None:
    with pytest.raises(accelctl.ProcessSetupError, match=r"starts torch\.distributed"):
        lightning.Trainer(accelerator=LightningAccelerator(MetaPair()), **options)


def test_a_cpu_device_named_for_a_non_cpu_accelerator_is_refused_before_training() -> None:
    # The run-time backstop (the only check on a Lightning version the adaptation skips).
    trainer = lightning.Trainer(
        accelerator=LightningAccelerator(MetaAccelerator()),
        strategy=SingleDeviceStrategy(device=torch.device("cpu")),
        max_epochs=1,
        **quiet_trainer_options(),
    )
    model = TinyRegression()
    with pytest.raises(lightning.fabric.utilities.exceptions.MisconfigurationException) as info:
        trainer.fit(model, tiny_loader())
    message = str(info.value)
    assert "'metaacc'" in message and "'cpu'" in message
    assert "SingleDeviceStrategy(device='meta:0')" in message
    assert model.losses == []


#: Import the bridge after ``{change}`` (a release newer than the window, or one whose internal
#: changed), then make a Trainer with the defaults on a ``meta`` device and set its device up.
ANOTHER_LIGHTNING = (
    """
import json, warnings
import lightning
from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
{change}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from accelctl.integrations import lightning as bridge
imported_wrapped = hasattr(_AcceleratorConnector._choose_strategy, "__accelctl_adapted__")
"""
    + META_ACCELERATOR
    + """

trainer = lightning.Trainer(accelerator=bridge.LightningAccelerator(Meta()), devices=1)
try:
    trainer.accelerator.setup_device(trainer.strategy.root_device)  # what fit() calls first
    refused = None
except lightning.fabric.utilities.exceptions.MisconfigurationException as error:
    refused = str(error)
print(json.dumps({{
    "refused": refused,
    "adapted": bridge.ADAPTED,
    "wrapped": hasattr(_AcceleratorConnector._choose_strategy, "__accelctl_adapted__"),
    "imported_wrapped": imported_wrapped,
    "root": str(trainer.strategy.root_device),
    "warnings": [str(w.message) for w in caught if "accelctl" in str(w.message)],
}}))
"""
)


def _another_lightning(change: str) -> dict[str, Any]:
    return run_scenario(ANOTHER_LIGHTNING.format(change=change))


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.99.0", "2.2.0"], ids=["newer", "older"])
def test_a_lightning_outside_the_window_with_the_same_internals_is_adapted_with_one_warning(
    version: str,
) -> None:
    # Older as newer: never refused by its number alone (the shape checks decide).
    result = _another_lightning(f'lightning.__version__ = "{version}"')
    assert (result["adapted"], result["wrapped"], result["root"]) == (True, True, "meta:0")
    assert result["imported_wrapped"] is False  # the bound accelerator enabled it, not the import
    assert result["refused"] is None
    (warning,) = result["warnings"]
    assert f"tested with lightning 2.3 to 2.6, not {version}" in warning


@pytest.mark.slow
def test_a_changed_internal_is_refused_when_the_bridge_is_imported() -> None:
    # What a release that renamed a private name the bridge imports looks like (Lightning's own
    # connectors bound it when they were imported, and run as before).
    result = refused_import(
        "lightning",
        "from lightning.pytorch.trainer.connectors.accelerator_connector import "
        "_AcceleratorConnector",
        "import lightning.fabric.strategies.fsdp as fsdp; del fsdp._FSDP_ALIASES",
        probe="hasattr(_AcceleratorConnector._choose_strategy, '__accelctl_adapted__')",
    )
    assert result["refused"] == (
        f"accelctl.integrations.lightning cannot run on lightning {lightning.__version__}: "
        "lightning.fabric.strategies.fsdp._FSDP_ALIASES is not there. The bridge is tested with "
        "lightning 2.3 to 2.6: pip install 'lightning>=2.3,<2.7' installs a tested release (pip "
        "install 'accelctl[lightning]' the newest)"
    )
    assert str(result["raised_in"]).endswith(os.path.join("_shared", "versions.py"))
    assert (result["probe"], result["warnings"]) == (False, [])


def test_a_bad_devices_spec_reaches_the_user_as_the_plugins_error() -> None:
    with pytest.raises(accelctl.DeviceSpecError) as info:
        lightning.Trainer(accelerator=LightningAccelerator("cpu"), devices="0,1")
    assert info.value.accelerator == "cpu"
    assert "'0,1'" in str(info.value) and "Accepted" in str(info.value)


class _RecordDtype(TinyRegression):
    """Records the dtype of the layer's output in every training step."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.dtypes.append(self.layer(batch[0]).dtype)
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("by_name", [False, True], ids=["instance", "name"])
def test_mixed_precision_autocasts_on_the_plugins_device_type(testnpu: Any, by_name: bool) -> None:
    # Item 8: Lightning autocasts on "cuda" for any accelerator but its own "cpu" and "mps".
    # (Lightning warns when the machine has SLURM's srun and this test turns warnings into
    # errors: the tests here see no srun, see conftest.py's no_scheduler_on_path.)
    if by_name:
        register_all()
    accelerator = "testnpu" if by_name else LightningAccelerator("testnpu")
    trainer = lightning.Trainer(
        accelerator=accelerator,
        devices=1,
        max_epochs=1,
        precision="bf16-mixed",
        **quiet_trainer_options(),
    )
    assert type(trainer.precision_plugin) is MixedPrecision
    assert trainer.precision_plugin.device == "cpu"  # testnpu's devices are CPUs
    model = _RecordDtype()
    trainer.fit(model, tiny_loader())
    assert set(model.dtypes) == {torch.bfloat16}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no GradScaler made for "cuda" along the way
        fabric = lightning.Fabric(accelerator=accelerator, devices=1, precision="16-mixed")
    assert fabric._precision.device == "cpu"


def test_a_users_mixed_precision_plugin_is_kept_and_a_wrong_device_is_warned() -> None:
    with pytest.warns(UserWarning, match=r"MixedPrecision\('bf16-mixed', device='cpu'\)"):
        trainer = lightning.Trainer(
            accelerator=LightningAccelerator("cpu"),
            devices=1,
            plugins=[MixedPrecision("bf16-mixed", device="cuda")],
            **quiet_trainer_options(),
        )
    assert trainer.precision_plugin.device == "cuda"


def test_mixed_precision_on_a_device_type_without_autocast_is_refused() -> None:
    assert not torch.amp.is_autocast_available("meta")
    with pytest.raises(accelctl.PrecisionError, match="no autocast for 'meta' devices"):
        lightning.Trainer(
            accelerator=LightningAccelerator(MetaAccelerator()), precision="bf16-mixed"
        )


class CclAccelerator(accelctl.Accelerator):
    """CPU devices whose plugin declares a backend torch does not default to for them."""

    name = "cclacc"
    device_type = "cpu"
    distributed_backend = "fakeccl"

    def detect(self) -> bool:
        return True

    def auto_device_count(self) -> int:
        return 2


@pytest.mark.parametrize("strategy", ["auto", "ddp", "ddp_spawn", "ddp_fork", "instance"])
def test_ddp_uses_the_plugins_distributed_backend(strategy: str) -> None:
    # Item 5: Lightning picks torch's default for the device type ("gloo" for cpu).
    from lightning.fabric.strategies.ddp import DDPStrategy as FabricDDPStrategy

    for make, ddp in ((lightning.Trainer, DDPStrategy), (lightning.Fabric, FabricDDPStrategy)):
        chosen: Any = ddp(timeout=None) if strategy == "instance" else strategy
        options = quiet_trainer_options() if make is lightning.Trainer else {}
        made = make(
            accelerator=LightningAccelerator(CclAccelerator()),
            devices=2,
            strategy=chosen,
            **options,
        )
        assert made.strategy.process_group_backend == "fakeccl", (make, strategy)


class _OwnWrapDDP(DDPStrategy):
    """A user's DDP strategy that wraps the model its own way."""

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return model


@pytest.mark.parametrize("strategy", [DDPStrategy, _OwnWrapDDP])
def test_setup_adapts_the_runs_strategy_object_not_lightnings_class(strategy: type) -> None:
    trainer = lightning.Trainer(
        accelerator=LightningAccelerator("cpu"), devices=1, strategy=strategy()
    )
    run = trainer.strategy
    trainer.accelerator.setup(trainer)  # what every Trainer strategy's setup(trainer) calls first
    own = {name: value for name, value in vars(run).items() if isinstance(value, OnStrategy)}
    # A strategy that wraps the model its own way keeps it; the reduction is adapted on both.
    assert sorted(own) == (["_setup_model", "reduce"] if strategy is DDPStrategy else ["reduce"])
    trainer.accelerator.setup(trainer)  # set up again: the same wrappers, not wrappers of them
    assert all(vars(run)[name] is value for name, value in own.items())
    for name in ("reduce", "_setup_model"):
        assert not hasattr(getattr(DDPStrategy, name), "__accelctl_adapted__"), name
    # No process group here: Lightning's own reduction runs, and gives the tensor back.
    assert run.reduce(torch.tensor(3.0), reduce_op="mean").item() == 3.0


class _OwnModuleFabricDDP(FabricDDPStrategy):
    """A user's Fabric DDP strategy that wraps the model its own way."""

    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module


class _RecordingFabricDDP(FabricDDPStrategy):
    """A user's Fabric DDP strategy with its own ``all_reduce``, which records the ops asked."""

    def all_reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        self.asked = [*getattr(self, "asked", []), reduce_op]
        return super().all_reduce(tensor, group, reduce_op)


def _fabric_model_parallel() -> Any:
    from lightning.fabric.strategies import ModelParallelStrategy

    return ModelParallelStrategy(_keep_module)


def _keep_module(module: Any, mesh: Any) -> Any:
    return module


@pytest.mark.parametrize(
    ("make", "adapted"),
    [
        (FabricDDPStrategy, ["all_reduce", "setup_module"]),
        (_OwnModuleFabricDDP, ["all_reduce"]),  # its own model wrap is kept
        (_fabric_model_parallel, ["all_reduce"]),  # it shards in its own setup_module
    ],
    ids=["ddp", "own-setup-module", "model-parallel"],
)
def test_fabric_adapts_its_strategy_object_not_lightnings_class(
    make: Any, adapted: list[str]
) -> None:
    from lightning.fabric.strategies import ModelParallelStrategy

    strategy = make()
    fabric = lightning.Fabric(accelerator=LightningAccelerator("cpu"), devices=2, strategy=strategy)
    assert fabric.strategy is strategy
    own = {name: value for name, value in vars(strategy).items() if isinstance(value, OnStrategy)}
    assert sorted(own) == adapted
    assert all(value.strategy is strategy for value in own.values())
    fabric._connector._init_strategy()  # again: the same wrappers, not wrappers of them
    assert all(vars(strategy)[name] is value for name, value in own.items())
    for cls in (FabricDDPStrategy, ModelParallelStrategy):
        for name in ("setup_module", "all_reduce"):
            function = vars(cls)[name]
            assert function.__module__.startswith("lightning.fabric."), (cls, name)
            assert not hasattr(function, "__accelctl_adapted__"), (cls, name)


def test_fabric_on_lightnings_own_accelerator_keeps_lightnings_strategy() -> None:
    fabric = lightning.Fabric(accelerator="cpu", devices=2, strategy="ddp")
    assert not [v for v in vars(fabric.strategy).values() if isinstance(v, OnStrategy)]


@pytest.fixture
def a_process_group() -> Iterator[None]:
    """A gloo process group of this process alone."""
    store = torch.distributed.HashStore()
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def test_fabrics_adapted_strategy_pickles_and_still_adapts(a_process_group: None) -> None:
    # Fabric's ddp_spawn launcher pickles the strategy into every worker.
    fabric = lightning.Fabric(
        accelerator=LightningAccelerator("cpu"), devices=2, strategy=_RecordingFabricDDP()
    )
    copy = pickle.loads(pickle.dumps(fabric.strategy))
    own = {name: value for name, value in vars(copy).items() if isinstance(value, OnStrategy)}
    assert sorted(own) == ["all_reduce", "setup_module"]
    assert all(value.strategy is copy for value in own.values())
    # The user's own all_reduce still runs, asked for a sum where Fabric asks for a mean; an
    # integer mean stays an integer.
    mean = copy.all_reduce(torch.tensor(3), reduce_op="mean")
    assert (mean.item(), mean.dtype, copy.asked) == (3, torch.int64, ["sum"])
    assert copy.all_reduce(torch.tensor(2.0), reduce_op="max").item() == 2.0
    assert copy.asked == ["sum", "max"]
    wrapped = copy.setup_module(torch.nn.Linear(2, 1))
    assert isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)


def test_a_ddp_backend_other_than_the_plugins_is_kept_and_warned() -> None:
    with pytest.warns(UserWarning, match=r"over 'fakeccl', but the strategy names 'gloo'"):
        trainer = lightning.Trainer(
            accelerator=LightningAccelerator(CclAccelerator()),
            devices=2,
            strategy=DDPStrategy(process_group_backend="gloo"),
            **quiet_trainer_options(),
        )
    assert trainer.strategy.process_group_backend == "gloo"


def test_the_constructor_teaches_what_it_accepts() -> None:
    with pytest.raises(TypeError, match="needs the accelerator"):
        LightningAccelerator()
    with pytest.raises(TypeError, match=r"LightningAccelerator\(3\).*accelerator name.*not int"):
        LightningAccelerator(3)
    with pytest.raises(accelctl.UnknownAcceleratorError, match="Did you mean 'cpu'"):
        LightningAccelerator("cpux")
    with pytest.raises(TypeError, match="not bound to a plugin"):
        LightningAccelerator.is_available()
    bound = LightningAccelerator.bind("cpu")
    assert bound is type(LightningAccelerator("cpu")) and bound.__qualname__ == (
        "LightningAccelerator[cpu]"
    )
    assert isinstance(bound(), LightningAccelerator)
    with pytest.raises(TypeError, match="bound to accelerator 'cpu'"):
        bound(MetaAccelerator())


def test_accelerators_pickle_for_spawned_processes(testnpu: Any) -> None:
    by_name = LightningAccelerator("testnpu")
    copy = pickle.loads(pickle.dumps(by_name))
    assert copy.name() == "testnpu" and copy.accelctl_handle() is by_name.accelctl_handle()

    direct = LightningAccelerator(testnpu.TestNPU())  # no entry point: the object travels
    copy = pickle.loads(pickle.dumps(direct))
    assert isinstance(copy.accelctl_handle().plugin, testnpu.TestNPU)
    assert copy.accelctl_handle().entry_point is None


SPAWN_PAYLOAD = """
import pickle, sys
import lightning
from accelctl.integrations.lightning import LightningAccelerator

trainer = lightning.Trainer(
    accelerator=LightningAccelerator("lazynpu"), devices=2, strategy="ddp_spawn", logger=False
)
# What torch.multiprocessing's spawn sends each worker (torch.multiprocessing.spawn._wrap's
# args), in the same order; plain pickle, so that no tensor is shared through this process.
launcher = trainer.strategy.launcher
payload = (launcher._wrapping_function, 0, (trainer, None, (), {}, None), None)
# Fabric's launcher pickles its strategy with it, adapted on the object (_lightning/strategy.py).
fabric = lightning.Fabric(
    accelerator=LightningAccelerator("lazynpu"), devices=2, strategy="ddp_spawn"
)
fabric_payload = (fabric.strategy.launcher._wrapping_function, 0, (len, (), {}, None), None)
open(sys.argv[1], "wb").write(pickle.dumps((payload, fabric_payload)))
"""

WORKER = """
import json, pickle, sys
payload, fabric_payload = pickle.load(open(sys.argv[1], "rb"))
function, rank, (trainer, *_), _ = payload
strategy = fabric_payload[0].__self__._strategy
adapted = {
    name: [type(value).__name__, value.strategy is strategy, value.original.__qualname__]
    for name, value in sorted(vars(strategy).items()) if name in ("all_reduce", "setup_module")
}
print(json.dumps([str(d) for d in trainer.strategy.parallel_devices]))
print(json.dumps(adapted))
"""


@pytest.mark.slow
def test_ddp_spawn_workers_unpickle_a_lazily_registered_device_type(
    fake_site: Any, tmp_path: Path
) -> None:
    # Item 8: a spawned worker is a fresh process where the plugin has not run yet; the
    # accelerator, unpickled first, lets the plugin register its device type there.
    fake_site.install("accelctl-lazynpu", {"lazynpu": "fakeplugins.lazy_device_type:LazyNPU"})
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake_site.root), *sys.path])}
    payload = tmp_path / "payload.pickle"
    for code in (SPAWN_PAYLOAD, WORKER):
        done = subprocess.run(
            [sys.executable, "-c", code, str(payload)],
            capture_output=True,
            text=True,
            env=environ,
            timeout=180,  # a hang guard: two imports of torch and Lightning
        )
        assert done.returncode == 0, done.stderr[-3000:]
    devices, adapted = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert devices == ["lazynpu:0", "lazynpu:1"]
    # Fabric's strategy arrives with its own DDP wrap and reduction, bound to itself.
    assert adapted == {
        "all_reduce": ["OnStrategy", True, "DDPStrategy.all_reduce"],
        "setup_module": ["OnStrategy", True, "DDPStrategy.setup_module"],
    }


class Vanishing(accelctl.Accelerator):
    """Available where it is made; ``GONE`` stands for a spawned process without the hardware."""

    name = "vanishing"
    device_type = "cpu"
    GONE = False

    def detect(self) -> bool:
        return not type(self).GONE

    def auto_device_count(self) -> int:
        return 1

    def unavailable_reason(self) -> str:
        return "no vanishing driver"


def test_a_spawned_process_without_the_accelerator_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = pickle.dumps(LightningAccelerator(Vanishing()))
    monkeypatch.setattr(Vanishing, "GONE", True)
    with pytest.raises(accelctl.AcceleratorUnavailableError, match="no vanishing driver"):
        pickle.loads(data)


def test_a_plugin_whose_detect_breaks_counts_as_unavailable_with_a_warning() -> None:
    class Broken(accelctl.Accelerator):
        name = "brokendetect"

        def detect(self) -> bool:
            raise RuntimeError("driver exploded")

        def auto_device_count(self) -> int:
            return 0

    bound = LightningAccelerator.bind(Broken())
    with pytest.warns(accelctl.PluginWarning, match="driver exploded"):
        assert bound.is_available() is False


# -- register_all and the name form -----------------------------------------------------------


def _only(fake_site: Any, **environ: str) -> accelctl.testing.Registry:
    """An accelctl registry that sees the fake site alone (not the plugins of the venv)."""
    return accelctl.testing.Registry(path=fake_site.path, environ=environ)


def test_register_all_then_training_by_name(testnpu: Any) -> None:
    result = register_all()  # the process-wide registry: every plugin of this environment

    assert isinstance(result, Registration)
    assert "testnpu" in result.registered
    assert "CPUAccelerator" in result.skipped["cpu"] and "override=True" in result.skipped["cpu"]
    assert result.broken == {}
    assert sorted(result.registered + list(result.skipped)) == [
        h.name for h in accelctl.list_accelerators(detect=False)
    ]
    assert result.to_dict() == json.loads(json.dumps(result.to_dict()))
    assert TRAINER_REGISTRY["cpu"]["accelerator"].__name__ == "CPUAccelerator"  # left alone
    assert "testnpu" in TRAINER_REGISTRY.available_accelerators()
    assert "class-based test accelerator" in TRAINER_REGISTRY["testnpu"]["description"]

    trainer, model = _fit("testnpu", devices=1)
    _assert_trained(model, steps=3 * 4)
    assert isinstance(trainer.accelerator, LightningAccelerator)
    assert trainer.accelerator.name() == "testnpu"
    assert ("setup_device", "cpu:0") in testnpu.CALLS  # the plugin's own device
    assert testnpu.CALLS[-1] == ("teardown",)

    # Fabric by name too.
    fabric = lightning.Fabric(accelerator="testnpu", devices=1)
    assert isinstance(fabric.accelerator, LightningAccelerator)
    model = TinyRegression()
    module, optimizer = fabric.setup(model, model.configure_optimizers())
    x, y = next(iter(tiny_loader()))
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(module(x), y)
        fabric.backward(loss)
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]


def test_register_all_is_repeatable_and_override_replaces_lightnings_own(testnpu: Any) -> None:
    assert "testnpu" in register_all().registered
    assert "testnpu" in register_all().registered  # ours are refreshed, not "already there"

    result = register_all(override=True)
    assert {"cpu", "testnpu"} <= set(result.registered) and result.skipped == {}
    for registry in (TRAINER_REGISTRY, FABRIC_REGISTRY):
        assert isinstance(registry.get("cpu"), LightningAccelerator)
    trainer = lightning.Trainer(accelerator="cpu", devices=1, **quiet_trainer_options())
    assert isinstance(trainer.accelerator, LightningAccelerator)


def test_a_broken_plugin_does_not_break_register_all(testnpu: Any, fake_site: Any) -> None:
    fake_site.install("accelctl-exploding", {"exploding": "fakeplugins.refuses_import"})
    fake_site.install("accelctl-hookless", {"hookless": "fakeplugins.hookless"})
    with pytest.warns(accelctl.PluginWarning) as caught:
        result = register_all(registry=_only(fake_site))

    assert result.registered == ["testnpu"] and result.skipped == {}
    assert set(result.broken) == {"exploding", "hookless"}
    assert "libhabana.so not found" in result.broken["exploding"]
    assert "required hook" in result.broken["hookless"]
    messages = " ".join(str(w.message) for w in caught)
    assert "libhabana.so not found" in messages and "hookless" in messages
    assert "exploding" not in TRAINER_REGISTRY and "hookless" not in TRAINER_REGISTRY
    assert "testnpu" in TRAINER_REGISTRY


def test_register_all_does_not_import_disabled_plugins(testnpu: Any, fake_site: Any) -> None:
    # One whose import would fail (it would be broken), one whose import would be seen.
    fake_site.install("accelctl-exploding", {"exploding": "fakeplugins.refuses_import"})
    fake_site.install("accelctl-quiet", {"quiet": "fakeplugins.undetected:UndetectedAccelerator"})
    result = register_all(registry=_only(fake_site, ACCELCTL_DISABLE="exploding,quiet"))
    assert result.registered == ["testnpu"]
    assert result.broken == {}
    assert "ACCELCTL_DISABLE" in result.skipped["exploding"]
    assert "ACCELCTL_DISABLE" in result.skipped["quiet"]
    assert "fakeplugins.undetected" not in sys.modules


def test_hpu_by_name_trains(fake_site: Any) -> None:
    # Lightning refuses the name "hpu" in its automatic strategy choice, for its own removed HPU
    # accelerator; accelctl's "hpu" takes the plugin's device instead.
    fake_site.install("accelctl-fakehpu", {"hpu": "fakeplugins.testnpu:TestNPU"})
    registry = _only(fake_site)
    assert register_all(registry=registry).registered == ["hpu"]
    trainer, model = _fit("hpu", epochs=1, devices=1)
    assert trainer.accelerator.name() == "hpu" and len(model.losses) == 4
    assert trainer.strategy.root_device == torch.device("cpu", 0)


# -- DDP ----------------------------------------------------------------------------------------

DDP_SCRIPT = '''
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, {tests!r})
    import lightning
    import torch
    from lightning.pytorch.strategies import DDPStrategy
    from scriptend import exit_without_teardown
    from tinymodel import TinyRegression, quiet_trainer_options, tiny_loader

    from accelctl.integrations._lightning.strategy import OnStrategy
    from accelctl.integrations.lightning import LightningAccelerator


    class UserCPU(LightningAccelerator.bind("cpu")):
        """A user's subclass of a bound accelerator, with state of its own."""

        def __init__(self, tag="default"):
            super().__init__()
            self.tag = tag


    class Report(lightning.pytorch.Callback):
        """Written by every rank at the end of its own fit (spawned workers included)."""

        def on_fit_start(self, trainer, model):
            self.initial = [p.detach().flatten().tolist() for p in model.parameters()]

        def on_train_end(self, trainer, model):
            report = {{
                "rank": trainer.global_rank,
                "world_size": trainer.world_size,
                "accelerator": type(trainer.accelerator).__qualname__,
                "tag": trainer.accelerator.tag,
                "backend": trainer.strategy.process_group_backend,
                "device": str(trainer.strategy.root_device),
                "initial": self.initial,
                "params": [p.detach().flatten().tolist() for p in model.parameters()],
                "losses": model.losses,
                # The DDP wrap and the mean reduction are the run's strategy's own attributes;
                # Lightning's class is left as it is.
                "own": sorted(
                    name for name, value in vars(trainer.strategy).items()
                    if isinstance(value, OnStrategy)
                ),
                "class_adapted": [
                    name for name in ("reduce", "_setup_model")
                    if getattr(getattr(DDPStrategy, name), "__accelctl_adapted__", False)
                ],
                "model": type(trainer.strategy.model).__name__,
                "mean": trainer.strategy.reduce(
                    torch.tensor(trainer.global_rank * 3.0), reduce_op="mean"
                ).item(),
            }}
            out = Path(sys.argv[1]) / f"rank{{trainer.global_rank}}.json"
            out.write_text(json.dumps(report))


    if __name__ == "__main__":
        trainer = lightning.Trainer(
            accelerator=UserCPU(tag="mine"), devices=2, strategy=sys.argv[2],
            max_epochs=4, callbacks=[Report()], **quiet_trainer_options(),
        )
        trainer.fit(TinyRegression(), tiny_loader())
        exit_without_teardown()
'''


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_ddp_on_two_cpu_processes_through_lightnings_own_strategies(
    tmp_path: Path, strategy: str
) -> None:
    # "ddp" starts the script again per rank; "ddp_spawn" pickles the Trainer, accelerator
    # included, into spawned workers.
    script = tmp_path / "train_ddp.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT.format(tests=str(HERE))))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), strategy],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    reports = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in reports] == [0, 1]
    for report in reports:
        assert report["world_size"] == 2
        # ddp_spawn pickles the accelerator: a user's subclass comes back as itself.
        assert (report["accelerator"], report["tag"]) == ("UserCPU", "mine")
        assert report["backend"] == "gloo" and report["device"] == "cpu"
        assert len(report["losses"]) == 4 * 2  # 64 samples / 2 ranks / 16 per batch, 4 epochs
        assert report["params"] != report["initial"]
        assert report["own"] == ["_setup_model", "reduce"] and report["class_adapted"] == []
        assert report["model"] == "DistributedDataParallel" and report["mean"] == 1.5
    # DDP kept the replicas in step, and each rank saw its own half of the data.
    assert reports[0]["params"] == reports[1]["params"]
    assert reports[0]["losses"][0] != reports[1]["losses"][0]
    assert reports[0]["losses"][-1] < reports[0]["losses"][0]
