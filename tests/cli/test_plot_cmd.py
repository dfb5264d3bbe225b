"""``accelctl plot`` and accelctl.plotting: a run's metrics.jsonl drawn as a PNG.

The files are written by a real Trainer's fit on the CPU, or by the Trainer's own MetricsLog
(several runs, a restart, figures a CPU run does not have); the figure's data are checked, not only
the file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from cliharness import Cli

from accelctl import plotting
from accelctl._training.metrics_log import MetricsLog

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GIB = float(1 << 30)


def panels(figure: Any) -> dict[str, Any]:
    """The figure's panels by title (a second y axis is not a panel)."""
    return {ax.get_title(loc="left"): ax for ax in figure.axes if ax.get_title(loc="left")}


def lines(ax: Any) -> dict[str, tuple[list[float], list[float]]]:
    """A panel's lines (its second axis' too) by label: (x, y)."""
    found = {}
    twins = [  # an untitled axis in the panel's own place (every panel shares the x axis)
        a
        for a in ax.get_shared_x_axes().get_siblings(ax)
        if not a.get_title(loc="left") and a.get_position().bounds == ax.get_position().bounds
    ]
    for axis in [ax, *twins]:
        for line in axis.get_lines():
            if not line.get_label().startswith("_"):
                found[line.get_label()] = (list(line.get_xdata()), list(line.get_ydata()))
    return found


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000


@pytest.mark.slow  # trains a model
def test_a_real_fit_is_drawn_from_its_root_dir(cli: Cli, tmp_path: Path) -> None:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import accelctl

    class Regression(nn.Linear):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    x = torch.randn(16, 4)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    root = tmp_path / "root"
    trainer = accelctl.Trainer(
        accelerator="cpu", max_epochs=2, root_dir=root, log_every_n_steps=2,
        enable_progress_bar=False,
    )  # fmt: skip
    trainer.fit(Regression(4, 1), data)

    out = tmp_path / "run.png"
    result = cli("plot", str(root), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert_png(out)
    records = read_lines(root / "metrics.jsonl")
    steps = [r for r in records if r["kind"] == "step"]
    run = steps[0]["run"]
    assert result.stdout == f"wrote {out}: run {run}, 4 logged steps, 2 epochs\n"

    drawn = panels(plotting.plot_metrics(root))
    assert list(drawn) == ["loss", "throughput", "FLOP/s", "memory"]  # no MFU without a peak
    loss = lines(drawn["loss"])
    assert loss["train_loss"] == ([2, 4, 6, 8], [r["train_loss"] for r in steps])
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert loss["train_loss (epoch)"] == ([4, 8], [r["train_loss"] for r in epochs])
    throughput = lines(drawn["throughput"])
    assert throughput["samples_per_second"] == (
        [2, 4, 6, 8],
        [r["samples_per_second"] for r in steps],
    )
    # The model's FLOPs are counted on the first step: their rate in a panel of its own.
    flops = lines(drawn["FLOP/s"])
    assert flops["flops_per_second"] == ([2, 4, 6, 8], [r["flops_per_second"] for r in steps])
    memory = lines(drawn["memory"])  # the CPU plugin's, in GiB
    assert set(memory) == {"memory_used_bytes", "memory_total_bytes"}
    assert memory["memory_total_bytes"][1] == [r["memory_total_bytes"] / GIB for r in steps]


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    """Write run-1 (two steps), then run-2 (steps 1-4, restarted at 3, on to 6).

    Run-2 has FLOPs, MFU and a vendor's memory figure; a torn line lies between the runs.
    """
    path = tmp_path / "metrics.jsonl"
    first = MetricsLog(path, run="run-1")
    for step in (1, 2):
        first.write({"kind": "step", "step": step, "epoch": 0, "train_loss": 9.0})
    first.close()
    with path.open("a") as file:
        file.write('{"kind": "step", "step": 3, "tra\n')  # a line torn by a crash
    for restart, steps in ((0, range(1, 5)), (1, range(3, 7))):
        log = MetricsLog(path, run="run-2", restart=restart)
        for step in steps:
            log.write({
                "kind": "step", "step": step, "epoch": 0, "train_loss": 10 * restart + step,
                "samples_per_second": 100.0 + step, "flops_per_second": 1e9 * step,
                "mfu": step / 10, "acme.memory_hbm_bytes": step * GIB,
                "memory_allocated_bytes": float("nan") if step == 5 else 2 * GIB,
            })  # fmt: skip
        log.close()
    log = MetricsLog(path, run="run-2", restart=1)
    log.write({"kind": "epoch", "epoch": 0, "step": 6, "train_loss": 12.5, "val_loss": 13.0})
    log.close()
    return path


def test_the_last_run_is_drawn_with_its_restart_and_latest_steps(cli: Cli, two_runs: Path) -> None:
    metrics = plotting.read_metrics(two_runs)
    assert (metrics.run, metrics.runs, metrics.skipped) == ("run-2", ["run-1", "run-2"], [3])
    assert metrics.resumes == [(3, "restart 1")]
    drawn = panels(plotting.plot_metrics(metrics))
    assert list(drawn) == ["loss", "throughput", "FLOP/s", "MFU", "memory"]
    # Steps 3 and 4 were written again after the restart: the restart's figures stand.
    loss = lines(drawn["loss"])
    assert loss["train_loss"] == ([1, 2, 3, 4, 5, 6], [1, 2, 13, 14, 15, 16])
    assert loss["val_loss (epoch)"] == ([6], [13.0])
    assert loss["train_loss (epoch)"] == ([6], [12.5])
    throughput = lines(drawn["throughput"])
    assert throughput["samples_per_second"][1] == [101, 102, 103, 104, 105, 106]
    assert lines(drawn["FLOP/s"])["flops_per_second"][1] == [1e9 * step for step in range(1, 7)]
    assert lines(drawn["MFU"])["mfu"][1] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    memory = lines(drawn["memory"])
    assert memory["acme.memory_hbm_bytes"][1] == [1, 2, 3, 4, 5, 6]
    allocated = memory["memory_allocated_bytes"][1]  # null (not finite) is a gap
    assert allocated[:4] == [2, 2, 2, 2] and allocated[4] != allocated[4] and allocated[5] == 2
    # The restart is marked on every panel at its first step.
    marks = [
        line.get_xdata() for line in drawn["MFU"].get_lines() if line.get_label() == "_restart 1"
    ]
    assert [list(mark) for mark in marks] == [[3, 3]]

    out = two_runs.parent / "out" / "r.png"
    out.parent.mkdir()
    result = cli("plot", str(two_runs), "--output", str(out))
    assert result.exit_code == 0, result.output
    assert_png(out)
    assert result.stdout == (
        f"wrote {out}: run run-2, 6 logged steps, 1 epoch (the file has 1 other run: --run)\n"
    )
    assert result.stderr == (
        f"warning: skipped 1 line(s) of {two_runs} that are not JSON objects (a line torn by "
        "a crash?): line 3\n"
    )


def test_run_chooses_another_run_and_the_default_name(
    cli: Cli, two_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(two_runs.parent)
    result = cli("plot", str(two_runs), "--run", "run-1")
    assert result.exit_code == 0, result.output
    assert_png(two_runs.parent / "metrics-run-1.png")
    drawn = panels(plotting.plot_metrics(two_runs, run="run-1"))
    assert list(drawn) == ["loss"] and lines(drawn["loss"])["train_loss"] == ([1, 2], [9, 9])
    result = cli("plot", str(two_runs), "--run", "run-9")
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: run 'run-9' is not in {two_runs}: its runs are 'run-1', 'run-2'\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist: give a Trainer's root_dir or its metrics.jsonl"),
        ("", "is empty; a Trainer's fit writes one line per logging step"),
        ("\n\n", "is empty"),
        ("not json\n{]\n", "holds no figures: none of its 2 lines is a JSON object"),
        ('{"kind": "requeue", "step": 1}\n[1, 2]\n', "holds no figures"),
        ('{"kind": "step", "step": 1, "run": "r", "note": "x"}\n', "has nothing to draw"),
    ],
    ids=["missing", "empty", "blank", "garbled", "no-figures", "nothing-to-draw"],
)
def test_a_file_without_figures_is_a_one_line_error(
    cli: Cli, tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "metrics.jsonl"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "out.png"
    result = cli("plot", str(path), "-o", str(out))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    assert not out.exists()


def test_a_folder_without_a_metrics_file_says_what_to_give(cli: Cli, tmp_path: Path) -> None:
    result = cli("plot", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: no metrics.jsonl in {tmp_path}: give a Trainer's root_dir (where it writes "
        "<root_dir>/metrics.jsonl) or the file itself\n"
    )


def test_an_output_that_cannot_be_written_is_a_one_line_error(cli: Cli, two_runs: Path) -> None:
    result = cli("plot", str(two_runs), "-o", str(two_runs.parent / "nofolder" / "x.png"))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot write {two_runs.parent / 'nofolder'}")
    result = cli("plot", str(two_runs), "-o", str(two_runs.parent / "x.unknownformat"))
    assert result.exit_code == 1
    assert "not supported" in result.stderr and "give a .png" in result.stderr


def test_without_matplotlib_the_command_says_what_to_install(
    cli: Cli, two_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails
    result = cli("plot", str(two_runs), "-o", str(two_runs.parent / "x.png"))
    assert result.exit_code == 1
    assert result.stderr == (
        "error: accelctl plot needs matplotlib (matplotlib is missing): pip install "
        "'accelctl[plot]' (in a clone of accelctl, from its folder: pip install -e '.[plot]')\n"
    )


def drawn_curves(figure: Any) -> dict[tuple[float, ...], list[Any]]:
    """Return the figure's visible, labelled curves by the place of their panel, in drawing order.

    A second y axis in the same place is the same panel.
    """
    figure.draw_without_rendering()  # the axes' limits and the layout, as a saved file has them
    found: dict[tuple[float, ...], list[Any]] = {}
    for ax in figure.axes:
        place = tuple(round(bound, 4) for bound in ax.get_position().bounds)
        for line in ax.get_lines():
            if line.get_visible() and not line.get_label().startswith("_"):
                found.setdefault(place, []).append(line)
    return found


def on_screen(line: Any) -> Any:
    import numpy as np

    points = np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float)
    return line.get_transform().transform(points)


def test_curves_that_share_a_panel_stay_visible(tmp_path: Path) -> None:
    """A curve lying exactly on another one in its panel does not hide it.

    The Trainer's FLOP/s is its samples/s times a constant, and a second axis scaled to each drew
    one over the other; equal memory figures and equal epoch losses likewise.
    """
    import numpy as np

    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path, run="run-0")
    for step in range(1, 7):
        samples = 100.0 + 10 * step * (-1) ** step
        log.write({
            "kind": "step", "step": step, "epoch": 0, "train_loss": 1 / step,
            "samples_per_second": samples, "flops_per_second": 2e9 * samples,
            "memory_allocated_bytes": step * GIB, "memory_reserved_bytes": step * GIB,
        })  # fmt: skip
    log.write({"kind": "epoch", "epoch": 0, "step": 6, "train_loss": 0.5, "val_loss": 0.5})
    log.close()
    panels = drawn_curves(plotting.plot_metrics(path))
    labels = sorted(line.get_label() for curves in panels.values() for line in curves)
    assert labels == sorted([
        "train_loss", "train_loss (epoch)", "val_loss (epoch)", "samples_per_second",
        "flops_per_second", "memory_allocated_bytes", "memory_reserved_bytes",
    ])  # fmt: skip
    hidden = []
    for curves in panels.values():
        for index, above in enumerate(curves):
            for beneath in curves[:index]:
                a, b = on_screen(above), on_screen(beneath)
                if a.shape != b.shape or not np.allclose(a, b, atol=0.5, equal_nan=True):
                    continue  # apart on the screen: both seen
                # On the same pixels: the one above lets the one beneath show through.
                if above.get_linestyle() not in ("None", ""):
                    shows = above.get_linestyle() != "-" and above.get_linewidth() < (
                        beneath.get_linewidth()
                    )
                else:
                    shows = above.get_markerfacecolor() == "none"
                if not shows:
                    hidden.append((beneath.get_label(), above.get_label()))
    assert hidden == []
