"""The benchmark suite runs end to end and writes a well-formed results file.

Quick mode, tiny sizes, one repeat. No timing is asserted: only that the figures exist, are sane in
kind, and that the counts the targets rest on are what accelctl's lazy loading promises.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import accelctl
from accelctl import hookspecs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `bench` is a folder of the repository, not an installed package

from bench.fakeplugins import PREFIX, install_fake_plugins  # noqa: E402
from bench.targets import Target  # noqa: E402

#: Sections already run in this test process (each xdist worker runs only what its tests need).
_RUNS: dict[str, tuple[dict, Path]] = {}


def quick_run(section: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """Run ``section`` once, quickly, in a process of its own; results and plot in a temp folder.

    Tiny sizes, one repeat; one process per section, so the sections run in parallel.
    """
    if section in _RUNS:
        return _RUNS[section]
    out = tmp_path_factory.mktemp(f"bench-{section}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELCTL_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--sections",
            section,
            "--sizes",
            "0,2",
            "--output",
            str(out / "results.json"),
            "--plot",
            str(out / "scaling.png"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        # A hang guard, not a speed limit: a quick section takes seconds alone and a minute or
        # more on a loaded 2-core machine; only a run that never ends should fail here.
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    _RUNS[section] = json.loads((out / "results.json").read_text()), out
    return _RUNS[section]


@pytest.fixture
def startup_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    return quick_run("startup", tmp_path_factory)


@pytest.fixture
def scaling_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    return quick_run("scaling", tmp_path_factory)


@pytest.fixture
def dispatch_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    return quick_run("dispatch", tmp_path_factory)


@pytest.fixture
def faults_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    return quick_run("faults", tmp_path_factory)


@pytest.mark.slow
def test_a_results_file_has_its_section_and_the_machine(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from bench.__main__ import SECTIONS

    # "distributed" (a launch of 2 openreg processes) and "fsdp"/"fsdp-openreg" (of 2 CPU
    # processes, of 2 openreg devices) have no quick run here: their loops are the openreg
    # tests' and tests/trainer/test_fsdp.py's, where the suite's time is better spent;
    # "deepspeed" runs quick in tests/deepspeed, where DeepSpeed is installed.
    assert set(SECTIONS) == {
        "startup", "scaling", "dispatch", "trainer", "faults", "distributed", "fsdp",
        "fsdp-openreg", "discovery", "flops", "kernels", "peers", "deepspeed",
    }  # fmt: skip
    results, _ = quick_run("trainer", tmp_path_factory)
    assert results["schema"] == 1 and results["quick"] is True and results["repeats"] == 1
    assert set(results["sections"]) == {"trainer"}
    assert not any("error" in section for section in results["sections"].values())
    machine = results["machine"]
    assert machine["logical_cores"] >= 1 and machine["packages"]["accelctl"]


@pytest.mark.slow
def test_startup_section(startup_run: tuple[dict, Path]) -> None:
    startup = startup_run[0]["sections"]["startup"]
    labels = [command["label"] for command in startup["commands"]]
    for label in ("python -c pass", "accelctl list --json", 'python -c "import torch"'):
        assert label in labels
    for command in startup["commands"]:
        assert len(command["runs_ms"]) == 1 and command["median_ms"] > 0
        assert command["median_max_rss_mib"] > 1
    # The contract: `list` on a machine without a GPU imports no torch; `resolve cpu` must.
    assert startup["imports"]["accelctl list --json"]["torch"] is False
    assert startup["imports"]["accelctl resolve --accelerator cpu --json"]["torch"] is True
    assert "cpu" in startup["imports"]["accelctl list --json"]["plugins"]
    assert startup["imports"]["accelctl list --no-detect --json"]["plugins"] == []
    # stats and env answer without torch where the plugins can (issue 13).
    for label in ("accelctl stats --json", "accelctl env --json"):
        assert startup["imports"][label]["torch"] is False
        assert "cpu" in startup["imports"][label]["plugins"]
    assert {"stats / import torch", "env peak RSS / list"} <= set(startup["ratios"])
    assert {t["target"] for t in startup["targets"]} >= {"accelctl list / floor <= 1.3"}


@pytest.mark.slow
def test_scaling_counts_plugin_imports(scaling_run: tuple[dict, Path]) -> None:
    scaling = scaling_run[0]["sections"]["scaling"]
    assert scaling["sizes"] == [0, 2]
    rows = {(row["command"], row["extra_plugins"]): row for row in scaling["rows"]}
    assert len(rows) == 5 * 2
    base = rows["list --json", 0]["plugins_imported"]
    assert base >= 1  # cpu at least
    assert rows["list --json", 2]["plugins_imported"] == base + 2
    assert rows["list --json", 2]["generated_plugins_imported"] == 2
    assert rows["resolve --json (auto)", 2]["generated_plugins_imported"] == 2
    for size in (0, 2):
        assert rows["list --no-detect --json", size]["plugins_imported"] == 0
        assert rows['get_accelerator("cpu")', size]["plugins_imported"] == 1
        assert rows["resolve --accelerator cpu --json", size]["plugins_imported"] == 1
        assert rows["list --json", size]["torch_imported"] is False
    named = [t for t in scaling["targets"] if "imported == 1" in t["target"]]
    assert len(named) == 2 and all(t["holds"] for t in named)
    # The plot is a PNG where matplotlib is installed.
    results, out = scaling_run
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert results["plot"].startswith("skipped: matplotlib is not installed")
        return
    assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_dispatch_section_times_every_hook(dispatch_run: tuple[dict, Path]) -> None:
    rows = dispatch_run[0]["sections"]["dispatch"]["rows"]
    null_hooks = {row["hook"] for row in rows if row["plugin"].startswith("null")}
    assert null_hooks == set(hookspecs.ALL_HOOKS)
    assert {row["hook"] for row in rows if row["plugin"].startswith("cpu")} >= {"detect"}
    for row in rows:
        assert row["direct_us"] > 0 and row["handle_us"] > 0


@pytest.mark.slow
def test_report_renders_a_results_file(dispatch_run: tuple[dict, Path]) -> None:
    _, out = dispatch_run
    proc = subprocess.run(
        [sys.executable, "-m", "bench.report", str(out / "results.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "## Hook dispatch" in proc.stdout and "| null (does nothing) | detect |" in proc.stdout


def test_bad_arguments_name_what_is_accepted() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--sections", "startup,nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "nope" in proc.stderr and "startup,scaling,dispatch,trainer,faults" in proc.stderr


@pytest.mark.slow
def test_faults_section(faults_run: tuple[dict, Path]) -> None:
    faults = faults_run[0]["sections"]["faults"]
    # The reports are the launcher's one line naming the rank that failed first.
    assert faults["killed_rank_exit_code"] == 137
    assert faults["killed_rank_report"].startswith("accelctl launch: rank 1 of 2 failed (killed")
    assert faults["killed_rank_s"] > 0 and faults["launches_per_case"] == 1
    # The other two cases run in full runs only (the supervision tests run both).
    assert "hung_rank_s" not in faults and "killed_launcher_s" not in faults
    checkpoints = faults["checkpoints"]
    assert checkpoints["checkpoint_mib"] > 0 and checkpoints["epoch_s"] > 0


def test_generated_plugins_are_real_installed_distributions(tmp_path: Path) -> None:
    names = install_fake_plugins(tmp_path, 3)
    assert names == [f"{PREFIX}0000", f"{PREFIX}0001", f"{PREFIX}0002"]
    registry = accelctl.testing.Registry(path=[str(tmp_path)])
    assert registry.names() == names
    sys.path.insert(0, str(tmp_path))
    try:
        handle = registry.get(names[1])
        assert handle.detect() is False and handle.info.family == "gpu"
        assert handle.unavailable_reason()
    finally:
        sys.path.remove(str(tmp_path))
        for name in names:
            sys.modules.pop(name, None)
    with pytest.raises(ValueError, match="already holds generated plugins"):
        install_fake_plugins(tmp_path, 1)


def test_target_verdicts() -> None:
    assert Target("t", 0.4, 0.5).verdict == "holds"
    assert Target("t", 1.0, 0.5).verdict == "misses by 2.00x"
    assert Target("n", 1, 1, "plugins", exact=True).holds
    assert not Target("n", 0, 1, "plugins", exact=True).holds


@pytest.mark.slow
def test_discovery_section_compares_both_scans_on_the_same_entry_points(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    results, _ = quick_run("discovery", tmp_path_factory)
    section = results["sections"]["discovery"]
    assert "error" not in section, section  # it raises when the two scans disagree
    # The generated plugins' entry points, and the environment's own (the in-repo plugins).
    assert section["plugins"] == 50 and section["entry_points"] >= 50
    ms = section["median_ms"]
    assert ms["accelctl"] > 0 and ms["importlib"] > 0
    ratio = ms["importlib"] / ms["accelctl"]
    assert section["ratio_importlib_accelctl"] == pytest.approx(ratio, rel=0.01)
    assert section["keep_own_scanner"] == (section["ratio_importlib_accelctl"] > 1.2)


def test_flops_section_times_fits_with_and_without_counting(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    section = quick_run("flops", tmp_path_factory)[0]["sections"]["flops"]
    assert section["repeats"] == 1 and section["met"] is None  # a quick run: no verdict
    assert len(section["counted_s"]) == len(section["plain_s"]) == 1
    assert section["ratio_fastest"] == pytest.approx(
        section["counted_fastest_s"] / section["plain_fastest_s"], rel=1e-2
    )


@pytest.mark.slow
def test_kernels_section_times_the_fallback_and_the_translation(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The kernels section runs both parts, each in a process of its own.

    A step on openreg with the CPU fallback against the CPU's, and the Trainer's step with and
    without its error translation.
    """
    results, out = quick_run("kernels", tmp_path_factory)
    section = results["sections"]["kernels"]
    assert (section["repeats"], section["quick"]) == (1, True)
    fallback = section["fallback"]
    if importlib.util.find_spec("torch_openreg") is None:  # the sessions install it
        assert fallback["skipped"].startswith("torch_openreg is not installed")
    else:
        assert (fallback["device"], fallback["accelerator"]) == ("openreg:0", "openreg")  # one name
        # The convolution and the attention ran on the CPU, and nothing else did.
        assert set(fallback["fallen_back"]) == {
            "aten::convolution_overrideable",
            "aten::convolution_backward_overrideable",
            "aten::_scaled_dot_product_fused_attention_overrideable",
        }
        models = fallback["models"]
        calls = {name: model["fallback_calls_per_step"] for name, model in models.items()}
        assert calls == {"cnn": 6, "gpt": 1, "mlp": 0}  # the MLP: the device's own cost
        for model in models.values():
            assert model["ratio"]["pairs"] == 2  # a quick run's repeat: 2 pairs of steps
            assert model["ratio"]["p25"] <= model["ratio"]["median"] <= model["ratio"]["p75"]
            assert model["cpu_ms_per_step"] > 0 and model["fallback_ms_per_step"] > 0
    translation = section["translation"]
    assert translation["fits"] == 1 and set(translation["ms_per_step"]) == {
        "translated", "untranslated", "translated_again",
    }  # fmt: skip
    for ratio in ("ratio_translated_untranslated", "ratio_translated_translated"):
        summary = translation[ratio]
        assert (
            summary["pairs"] >= 1 and summary["ci95"][0] <= summary["median"] <= summary["ci95"][1]
        )
    assert translation["within_noise"] in (True, False)  # a quick run's few pairs: no claim
    assert set(translation["try_statement_ns"]) == {"bare", "try_except"}
    rendered = subprocess.run(
        [sys.executable, "-m", "bench.report", str(out / "results.json")],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "## Missing kernels: the CPU fallback and the error translation" in rendered


def test_the_translations_variant_is_the_step_without_its_try() -> None:
    """The bench's step without translation is the Trainer's own step, its try replaced by its body.

    The try around the backward; nothing else differs.
    """
    import ast
    import inspect
    import textwrap

    from accelctl._training.epochs import Epochs

    from bench.kernels import untranslated_step

    variant = untranslated_step()
    real = ast.parse(textwrap.dedent(inspect.getsource(Epochs._step)))
    tries = [node for node in ast.walk(real) if isinstance(node, ast.Try)]
    assert len(tries) == 1
    assert variant.__code__.co_filename == "<Epochs._step without its try>"
    assert (
        variant.__code__.co_varnames[: variant.__code__.co_argcount]
        == (Epochs._step.__code__.co_varnames[: Epochs._step.__code__.co_argcount])
    )
    assert "missing" not in variant.__code__.co_varnames  # the except's name is gone
    assert "missing" in Epochs._step.__code__.co_varnames


@pytest.mark.slow
def test_peers_section_runs_a_cell_and_renders(tmp_path: Path) -> None:
    """One cell of the peers section runs, has every figure, and renders.

    accelctl's Trainer on 2 openreg devices under ``accelctl launch``, the hand loop in DDP in the
    same processes, a few steps: every workload has a figure of each, each rank its peak; the
    frameworks' cells say why they do not run where their framework is not installed (the core
    session's); the table renders.
    """
    from bench import peers
    from bench.peers_report import render_peers

    if importlib.util.find_spec("torch_openreg") is None:
        pytest.skip("torch_openreg is not installed (the test sessions install it)")
    section = peers.run(
        quick=True, paths=("accelctl", "lightning"), devices=("openreg",), processes=(2,),
        with_list=False,
    )  # fmt: skip
    cells = {cell["path"]: cell for cell in section["cells"]}
    cell = cells["accelctl"]
    assert "error" not in cell, cell
    assert len(cell["peak_rss_mib"]) == 2 and min(cell["peak_rss_mib"]) > 100  # torch at least
    assert cell["startup_s"] > 0
    assert set(cell["workloads"]) == {"cnn 32", "cnn bf16-mixed", "gpt 32", "gpt bf16-mixed"}
    for figures in cell["workloads"].values():
        assert "error" not in figures, figures
        assert len(figures["path_ms"]) == len(figures["hand_ms"]) == 1
        own, hand = figures["path_ms"][0], figures["hand_ms"][0]
        assert figures["ratio"]["median"] == pytest.approx(own / hand, rel=1e-3)
        own, hand = figures["path_cpu_ms"][0], figures["hand_cpu_ms"][0]
        assert own > 0 and hand > 0  # the processes' CPU time, each step
        assert figures["cpu_ratio"]["median"] == pytest.approx(own / hand, rel=1e-3)
    if importlib.util.find_spec("lightning") is None:
        assert cells["lightning"]["skipped"].startswith("lightning is not installed")
    else:
        assert "own" in cells["lightning"]["skipped"]  # Lightning has no openreg of its own
    table = render_peers(section)
    assert "| accelctl.Trainer | openreg x2 |" in table and "Not run:" in table


def test_peers_figures_and_targets_come_from_the_runs() -> None:
    """The per-step figure leaves the warm-up out; a target takes its worst workload.

    A bridge's target is the ratio of its ratio to its framework's, on the same device and
    processes.
    """
    from bench import peers

    assert peers.per_step_s([0.0, 1.0, 3.0, 6.0, 10.0], warm=1) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="5 steps recorded"):
        peers.per_step_s([0.0, 1.0, 2.0, 3.0, 4.0], warm=4)

    def cell(path: str, ratios: list[float]) -> dict:
        keys = [peers.workload_key(m, p) for m, p in peers.WORKLOADS]
        workloads = {k: {"ratio": {"median": r}} for k, r in zip(keys, ratios, strict=True)}
        return {"path": path, "device": "cpu", "processes": 1, "workloads": workloads}

    found = {
        t["target"]: t
        for t in peers.targets([
            cell("accelctl", [1.01, 1.05, 1.0, 0.99]), cell("lightning", [1.2, 1.1, 1.3, 1.0]),
            cell("accelerate", [1.1] * 4), cell("accelerate-bridge", [1.1, 1.1, 1.2, 1.1]),
        ])
    }  # fmt: skip
    ours = found["accelctl.Trainer / hand <= 1.03, cpu x1 (worst: cnn bf16-mixed)"]
    assert (ours["measured"], ours["holds"]) == (1.05, False)
    versus = found["accelctl.Trainer / Lightning Trainer < 1, cpu x1 (worst: gpt bf16-mixed)"]
    assert versus["measured"] == pytest.approx(0.99, abs=1e-3) and versus["holds"]
    bridge = found["accelerate-bridge / accelerate <= 1.02, cpu x1 (worst: gpt 32)"]
    assert bridge["measured"] == pytest.approx(1.2 / 1.1, abs=1e-3) and not bridge["holds"]
    assert not any("transformers" in name for name in found)  # no cells: no target


def test_fanout_bench_lists_every_plugin_under_both_policies() -> None:
    """The fan-out bench times the pool and one thread on the same plugins, then sets back."""
    from accelctl._host import fanout

    from bench.fanout import run

    current = fanout.Policy(workers=3)
    previous = fanout.set_policy(current)
    try:
        result = run(count=6, listings=2, repeats=2)  # it raises where a listing misses a plugin
        assert fanout.set_policy(current) is current  # the bench set back the policy it found
    finally:
        fanout.set_policy(previous)
    assert (result["plugins"], result["pool_threads"]) == (6, 4)
    ms = result["ms_per_listing"]
    assert ms["pool"] > 0 and ms["one thread"] > 0
    ratio = ms["pool"] / ms["one thread"]
    assert result["ratio_pool_one_thread"] == pytest.approx(ratio, rel=0.01)
