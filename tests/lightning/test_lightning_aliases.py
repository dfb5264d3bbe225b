"""``register_all()`` registers every alias with Lightning too.

The generic PrivateUse1 plugin answers to ``openreg``, so ``register_all();
lightning.Trainer(accelerator="openreg")``, the README's "by name" form, must find it, as
``accelctl.resolve("openreg")`` does.

The plugin here has that shape (canonical name ``slot``, alias ``twinalias``) with CPU devices.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

lightning = pytest.importorskip("lightning")

from lightning.fabric.accelerators import ACCELERATOR_REGISTRY as FABRIC_REGISTRY  # noqa: E402
from lightning.pytorch.accelerators import AcceleratorRegistry as TRAINER_REGISTRY  # noqa: E402

import accelctl  # noqa: E402
from accelctl.integrations.lightning import LightningAccelerator, register_all  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "integrations"))  # tinymodel.py: a helper module
from tinymodel import quiet_trainer_options  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_lightning_registries() -> Iterator[None]:
    """register_all() writes to Lightning's process-wide registries: put them back after."""
    saved = [(registry, dict(registry)) for registry in (TRAINER_REGISTRY, FABRIC_REGISTRY)]
    yield
    for registry, content in saved:
        registry.clear()
        registry.update(content)


def _registry(fake_site: Any, **classes: str) -> accelctl.testing.Registry:
    """Install plugins ``name -> class of fakeplugins.slots``; return a registry of them alone.

    The classes have CPU devices and their own aliases.
    """
    for name, cls in classes.items():
        fake_site.install(f"accelctl-{name}", {name: f"fakeplugins.slots:{cls}"})
    return accelctl.testing.Registry(path=fake_site.path)


def test_an_alias_is_registered_and_lightning_trains_by_it(fake_site: Any) -> None:
    result = register_all(registry=_registry(fake_site, slot="AliasTwinalias"))
    assert (result.registered, result.aliases) == (["slot"], {"twinalias": "slot"})
    for registry in (TRAINER_REGISTRY, FABRIC_REGISTRY):
        assert registry["twinalias"]["accelerator"] is registry["slot"]["accelerator"]
    trainer = lightning.Trainer(accelerator="twinalias", devices=1, **quiet_trainer_options())
    assert isinstance(trainer.accelerator, LightningAccelerator)
    assert trainer.accelerator.accelctl_handle().name == "slot"
    assert isinstance(lightning.Fabric(accelerator="twinalias").accelerator, LightningAccelerator)


def test_an_alias_lightning_has_is_left_alone_unless_override(fake_site: Any) -> None:
    registry = _registry(fake_site, slot="AliasCuda")
    result = register_all(registry=registry)
    assert (result.registered, result.aliases) == (["slot"], {})
    assert "Lightning already has 'cuda'" in result.skipped["cuda"]
    assert not issubclass(TRAINER_REGISTRY["cuda"]["accelerator"], LightningAccelerator)
    assert register_all(override=True, registry=registry).aliases == {"cuda": "slot"}


def test_another_plugins_canonical_name_wins_over_an_alias(fake_site: Any) -> None:
    result = register_all(registry=_registry(fake_site, slot="AliasOther", other="CpuSlot"))
    assert (sorted(result.registered), result.aliases) == (["other", "slot"], {})
    assert TRAINER_REGISTRY["other"]["accelerator"].accelctl_handle().name == "other"


def test_register_all_skips_a_disabled_plugin_without_importing_it(fake_site: Any) -> None:
    import warnings

    fake_site.install("acme-policed", {"policed": "fakeplugins.exits_at_import"})
    reg = accelctl.testing.Registry(path=fake_site.path, environ={"ACCELCTL_DISABLE": "policed"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # skipped as disabled, not warned about as broken
        result = register_all(registry=reg)
    assert result.skipped == {"policed": "disabled by ACCELCTL_DISABLE"} and result.broken == {}
    assert "fakeplugins.exits_at_import" not in sys.modules


def test_a_backend_plugin_is_registered_by_its_devices_name(fake_site: Any) -> None:
    # Issue 46: one name per device. The generic PrivateUse1 plugin's shape (installed as "slot",
    # devices and alias "twin") is registered as "twin", the name accelctl shows; the plugin's
    # own name still finds it, as accelctl.resolve("slot") does.
    result = register_all(registry=_registry(fake_site, slot="SlotAccelerator"))
    assert (result.registered, result.aliases) == (["twin"], {"slot": "twin"})
    for registry in (TRAINER_REGISTRY, FABRIC_REGISTRY):
        assert registry["slot"]["accelerator"] is registry["twin"]["accelerator"]
        assert registry["twin"]["accelerator"].name() == "twin"
