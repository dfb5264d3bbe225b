"""What each bridge checks of its framework at import is every name its code uses.

The declaration (accelctl/integrations/_shared/uses.py) is derived from the code by
tests/bridgeuses.py; the derivation finds the names that crashed inside the bridges before, and
nothing outside the bridges' own modules uses a framework.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from bridgeuses import BRIDGES, declaration, module_uses, shared_modules, uses_of

from accelctl.integrations._shared import uses as _uses

HERE = Path(__file__).resolve().parent


def test_the_declared_uses_are_the_ones_the_bridges_code_has() -> None:
    for bridge in BRIDGES:
        derived, declared = set(uses_of(bridge)), set(_uses.USES[bridge])
        assert derived == declared, (
            f"accelctl.integrations.{bridge}: used but not declared {sorted(derived - declared)}, "
            f"declared but not used {sorted(declared - derived)}. Write the declaration anew: "
            "python tests/bridgeuses.py --write"
        )
    assert (Path(_uses.__file__).read_text()) == declaration()


def test_each_bridges_adaptation_checks_its_uses() -> None:
    from accelctl.integrations._accelerate import state as _accelerate_state
    from accelctl.integrations._lightning import adaptation as _lightning_adaptation
    from accelctl.integrations._ray import adaptation as _ray_adaptation
    from accelctl.integrations._transformers import state as _transformers_state

    adaptations = {
        "lightning": _lightning_adaptation.ADAPTATION,
        "accelerate": _accelerate_state.ADAPTATION,
        "transformers": _transformers_state.ADAPTATION,
        "ray": _ray_adaptation.ADAPTATION,
    }
    for bridge, adaptation in adaptations.items():
        assert adaptation.bridge == bridge
        assert adaptation.uses == _uses.USES[bridge]


@pytest.mark.parametrize(
    ("bridge", "use"),
    [
        # Accelerate 1.0 and 1.3: AttributeError inside the bridge's prepare.
        ("accelerate", "accelerate:Accelerator.is_fsdp2"),
        # Lightning 2.2: ImportError inside the bridge's _refuse_unadapted_sharding.
        ("lightning", "lightning.pytorch.strategies:ModelParallelStrategy"),
        # A keyword the bridge passes to a framework's callable: its signature is checked.
        ("accelerate", "accelerate:ParallelismConfig(dp_shard_size)"),
        ("accelerate", "accelerate:Accelerator.__init__(self, cpu)"),
        # An attribute of a parameter annotated with a framework class.
        ("lightning", "lightning.pytorch:Trainer.strategy"),
        # A framework attribute set by the bridge's subclass (its own fields are not uses).
        ("transformers", "transformers:TrainingArguments.use_cpu"),
        # An import inside a function.
        ("transformers", "accelerate.state:PartialState._shared_state"),
        ("ray", "ray.train.torch:prepare_model(_, move_to_device, parallel_strategy, "
                "parallel_strategy_kwargs)"),
    ],
)  # fmt: skip
def test_the_derivation_finds_what_the_bridges_use(bridge: str, use: str) -> None:
    assert use in uses_of(bridge)


def test_a_bridges_own_names_are_not_uses() -> None:
    accelerate_uses = uses_of("accelerate")
    assert not [use for use in accelerate_uses if "accelctl_accelerator" in use]
    ray_uses = uses_of("ray")
    # TorchConfig's own fields, read from a config narrowed with isinstance.
    assert not [use for use in ray_uses if use.endswith((".report", ".cpu_fallback"))]
    assert "ray.train.torch:TorchConfig.init_method" in ray_uses


def test_the_derivation_reads_each_form_of_use(tmp_path: Path) -> None:
    module = tmp_path / "bridge.py"
    module.write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING, Annotated, Any\n"
        "import accelerate\n"
        "import ray.train.torch\n"
        "if TYPE_CHECKING:\n"
        "    import lightning.pytorch as pl\n"
        "Connector = Annotated[Any, 'lightning.fabric.connector:_Connector']\n"
        "class Mine(accelerate.Accelerator):\n"
        "    def __init__(self) -> None:\n"
        "        super().__init__(cpu=True)\n"
        "        self.own = 1\n"
        "    def run(self, trainer: pl.Trainer, connector: Connector) -> None:\n"
        "        self.own, self.is_fsdp2\n"
        "        trainer.strategy.root_device\n"
        "        connector._parallel_devices\n"
        "        from accelerate.state import PartialState\n"
        "        move = PartialState.set_device\n"
        "        move(self)\n"
        "        ray.train.torch.prepare_model(*self.args, move_to_device=None)\n"
        "        getattr(self, 'gone')\n"
        "        getattr(self, 'maybe', None)\n"
    )
    assert module_uses(module) == {
        "accelerate",
        "accelerate:Accelerator",
        "accelerate:Accelerator.__init__",
        "accelerate:Accelerator.__init__(self, cpu)",
        "accelerate:Accelerator.is_fsdp2",
        "accelerate:Accelerator.args",
        "accelerate:Accelerator.gone",
        "ray",
        "ray.train",
        "ray.train.torch",
        "ray.train.torch:prepare_model",
        "ray.train.torch:prepare_model(..., move_to_device)",
        "lightning.pytorch:Trainer.strategy.root_device",
        "lightning.fabric.connector:_Connector",
        "lightning.fabric.connector:_Connector._parallel_devices",
        "accelerate.state",
        "accelerate.state:PartialState",
        "accelerate.state:PartialState.set_device",
        "accelerate.state:PartialState.set_device(_)",
    }


def test_no_module_but_a_bridges_own_uses_a_framework() -> None:
    for path in shared_modules():
        assert module_uses(path) == set(), f"{path.name} uses a framework: give it to its bridge"


def test_the_declaration_is_valid_python() -> None:
    ast.parse(declaration())


def test_every_bridge_offers_what_it_adapts_by_the_same_names() -> None:
    # docs/frameworks.md: each bridge module's ADAPTATION says what it checked, ADAPTED whether
    # it adapted; read from the modules' syntax (the frameworks are not installed here).
    integrations = Path(__file__).resolve().parents[2] / "core" / "accelctl" / "integrations"
    for bridge in BRIDGES:
        tree = ast.parse((integrations / f"{bridge}.py").read_text())
        assigned = {
            target.id
            for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.ImportFrom))
            for target in (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else [ast.Name(alias.asname or alias.name) for alias in node.names]
            )
            if isinstance(target, ast.Name)
        }
        exported = next(
            ast.literal_eval(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        )
        assert {"ADAPTATION", "ADAPTED"} <= assigned & set(exported), bridge
