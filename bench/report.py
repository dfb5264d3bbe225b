"""Markdown tables of a results file, for ``docs/performance.md`` and the terminal.

``python -m bench.report bench/results/latest.json`` prints them for an earlier run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _targets(targets: Sequence[dict[str, Any]]) -> str:
    return _table(
        ("target", "measured", "verdict"),
        [(t["target"], f"{t['measured']:g} {t['unit']}", t["verdict"]) for t in targets],
    )


def _machine(machine: dict[str, Any]) -> str:
    packages = ", ".join(f"{name} {v}" for name, v in machine["packages"].items() if v)
    return (
        f"- CPU: {machine['cpu_model']}, {machine['logical_cores']} logical cores "
        f"({machine['usable_cores']} usable), {machine['memory_gib']} GiB\n"
        f"- OS: {machine['platform']}\n"
        f"- Python {machine['python']} ({machine['python_implementation']}); {packages}"
    )


def _startup(section: dict[str, Any]) -> str:
    rows = []
    for cmd in section["commands"]:
        probe = section["imports"].get(cmd["label"])
        torch = "" if probe is None else ("yes" if probe["torch"] else "no")
        plugins = "" if probe is None else (", ".join(probe["plugins"]) or "none")
        rows.append(
            (f"`{cmd['label']}`", cmd["median_ms"], cmd["median_max_rss_mib"], torch, plugins)
        )
    table = _table(
        ("command", "median ms", "peak RSS MiB", "imports torch", "plugins imported"), rows
    )
    ratios = _table(("ratio", "value"), [(k, f"{v:g}x") for k, v in section["ratios"].items()])
    return f"{table}\n\n{ratios}\n\n{_targets(section['targets'])}"


def _scaling(section: dict[str, Any]) -> str:
    sizes = section["sizes"]
    commands = list(dict.fromkeys(row["command"] for row in section["rows"]))
    cell = {(r["command"], r["extra_plugins"]): r for r in section["rows"]}
    times = _table(
        ("command", *(f"{n} extra" for n in sizes)),
        [(f"`{c}`", *(cell[c, n]["median_ms"] for n in sizes)) for c in commands],
    )
    counts = _table(
        ("command", *(f"{n} extra" for n in sizes)),
        [(f"`{c}`", *(cell[c, n]["plugins_imported"] for n in sizes)) for c in commands],
    )
    memory = _table(
        ("command", *(f"{n} extra" for n in sizes)),
        [(f"`{c}`", *(cell[c, n]["median_max_rss_mib"] for n in sizes)) for c in commands],
    )
    torch_ms = section["import_torch"]["median_ms"]
    return (
        f"Median ms (`import torch` in the same run: {torch_ms} ms):\n\n{times}\n\n"
        f"Plugins imported (every installed plugin counts, `cpu` included):\n\n{counts}\n\n"
        f"Peak RSS MiB:\n\n{memory}\n\n{_targets(section['targets'])}"
    )


def _dispatch(section: dict[str, Any]) -> str:
    rows = [
        (r["plugin"], r["hook"], r["direct_us"], r["pluggy_us"], r["handle_us"], r["overhead_us"])
        for r in section["rows"]
    ]
    table = _table(
        ("plugin", "hook", "direct µs", "pluggy hook µs", "handle µs", "handle - direct µs"), rows
    )
    concurrent = section.get("concurrent")
    if concurrent:
        table += (
            f'\n\n{concurrent["threads"]} threads calling `resolve("cpu", 1)`, '
            f'`get_accelerator("cpu")` and `device_stats` in turn for {concurrent["seconds"]:g} s: '
            f"{concurrent['calls']:,} calls ({concurrent['calls_per_s']:,}/s; one thread alone: "
            f"{concurrent['one_thread_calls_per_s']:,}/s)."
        )
    if section.get("targets"):
        table += "\n\n" + _targets(section["targets"])
    return table


def _trainer(section: dict[str, Any]) -> str:
    if "skipped" in section:
        return f"_skipped: {section['skipped']}_"
    if {"hand_loop_ms_per_step", "trainer_ms_per_step", "ratio"} <= set(section):
        met = {True: "holds", False: "misses", None: "quick run, no verdict"}[section.get("met")]
        table = _table(
            ("device", "steps per run", "hand loop ms/step", "Trainer ms/step", "ratio", "target"),
            [
                (
                    section.get("device"),
                    section.get("steps_per_run"),
                    section["hand_loop_ms_per_step"],
                    section["trainer_ms_per_step"],
                    f"{section['ratio']:g}x",
                    f"<= {section.get('target')}x: {met}",
                )
            ],
        )
        return f"{section.get('model', '')}, medians of {section.get('repeats')} runs.\n\n{table}"
    return "```json\n" + json.dumps(section, indent=2) + "\n```"


def _distributed(section: dict[str, Any]) -> str:
    if "skipped" in section:
        return f"_skipped: {section['skipped']}_"
    per_step, medians = section["ms_per_step"], section["median_s"]
    ratios = {"hand": "1x", "trainer": f"{section['ratio_trainer']:g}x"}
    ratios["accelerate"] = f"{section['ratio_accelerate']:g}x"
    labels = {
        "hand": "by hand on torch.distributed (DDP, DistributedSampler)",
        "trainer": "accelctl.Trainer (a checkpoint per epoch)",
        "accelerate": "Accelerate's Accelerator through accelctl",
    }
    paired = {name: f"{section[f'ratio_{name}_paired']:g}x" for name in ("trainer", "accelerate")}
    fastest = {name: f"{section[f'ratio_{name}_fastest']:g}x" for name in ("trainer", "accelerate")}
    paired["hand"] = fastest["hand"] = "1x"
    table = _table(
        ("loop", "s per run", "ms per step", "ratio of medians", "paired", "fastest runs"),
        [
            (labels[name], medians[name], per_step[name], ratios[name], paired[name], fastest[name])
            for name in labels
        ],
    )
    return (
        f"{section['accelerator']} on {', '.join(section['devices'])} over "
        f"{section['backend']}; {section.get('model', '')}; {section['steps_per_run']} steps per "
        f"process a run, medians of {section['repeats']} runs in one launch.\n\n{table}\n\n"
        f"Accelerate's set-up (its state, the `Accelerator`, `prepare`): "
        f"{section.get('accelerate_set_up_median_s')} s a run (median)."
    )


def _fsdp(section: dict[str, Any]) -> str:
    per_step, medians = section["ms_per_step"], section["median_s"]
    table = _table(
        ("loop", "s per run", "ms per step", "ratio of medians", "paired", "fastest runs"),
        [
            ("by hand: fully_shard, DistributedSampler", medians["hand"], per_step["hand"],
             "1x", "1x", "1x"),
            ("accelctl.Trainer(strategy='fsdp') (a sharded checkpoint per epoch)",
             medians["trainer"], per_step["trainer"], f"{section['ratio_trainer']:g}x",
             f"{section['ratio_trainer_paired']:g}x", f"{section['ratio_trainer_fastest']:g}x"),
        ],
    )  # fmt: skip
    memory = section["memory_bytes_per_rank"]
    rows = [
        (f"rank {rank}", strategy, *(f"{held[kind] / 2**20:.1f}" for kind in _HELD))
        for rank, per_strategy in enumerate(memory)
        for strategy, held in per_strategy.items()
    ]
    held = _table(("process", "strategy", *(f"{kind} MiB" for kind in _HELD)), rows)
    return (
        f"{section['accelerator']} on {', '.join(section['devices'])} over "
        f"{section['backend']}; {section.get('model', '')}; {section['steps_per_run']} steps per "
        f"process a run, medians of {section['repeats']} runs in one launch.\n\n{table}\n\n"
        f"Held after a step ({section.get('memory_model', '')}), FSDP2 / DDP: "
        f"{section['memory_ratio_fsdp_ddp']:g}x\n\n{held}"
    )


def _deepspeed(section: dict[str, Any]) -> str:
    per_step = section["ms_per_step"]
    low, high = section["ratio_bridge_ci95"]
    table = _table(
        ("DeepSpeed's accelerator", "ms per step", "paired ratio (95% interval)", "fastest turns"),
        [
            ("its own CPU_Accelerator (DS_ACCELERATOR=cpu)", per_step["deepspeed_cpu"], "1x", "1x"),
            ("accelctl's bridge, CPU plugin", per_step["bridge"],
             f"{section['ratio_bridge_paired']:g}x ({low:g} to {high:g})",
             f"{section['ratio_bridge_fastest']:g}x"),
        ],
    )  # fmt: skip
    cpu_low, cpu_high = section["cpu_ratio_bridge_ci95"]
    return (
        f"DeepSpeed {section['deepspeed']}, ZeRO-2 on {section['world_size']} CPU processes over "
        f"{section['backend']}; {section['model']}; {section['steps_per_turn']} steps a turn, the "
        f"two engines taking turns in the same processes, {section['repeats']} turns each."
        f"\n\n{table}\n\nCPU time of the ranks, paired ratio: "
        f"{section['cpu_ratio_bridge_paired']:g}x ({cpu_low:g} to {cpu_high:g}). Target: at most "
        f"{section['target']:g}x."
    )


def _discovery(section: dict[str, Any]) -> str:
    ms = section["median_ms"]
    table = _table(
        ("scan", "median ms", "ratio"),
        [
            ("accelctl._host.discovery.scan", ms["accelctl"], "1x"),
            ("importlib.metadata", ms["importlib"], f"{section['ratio_importlib_accelctl']:g}x"),
        ],
    )
    verdict = "kept" if section["keep_own_scanner"] else "not worth keeping"
    return (
        f"{section['plugins']} generated plugins first on the path, {section['distributions']} "
        f"distributions in all, {section['entry_points']} entry points found by both; medians "
        f"of {section['repeats']} alternated scans in one process.\n\n{table}\n\n"
        f"accelctl's own scanner: {verdict} (the rule: more than 1.2x faster)."
    )


#: The storages a process holds for its model, as ``fsdp_overhead.held_bytes`` counts them.
_HELD = ("parameters", "gradients", "optimizer", "total")


def _faults(section: dict[str, Any]) -> str:
    launches = section["launches_per_case"]
    rows: list[tuple[Any, ...]] = [
        ("rank 1 SIGKILLed", f"{section['killed_rank_s']} s", section["killed_rank_exit_code"])
    ]
    said = [section["killed_rank_report"]]
    if "hung_rank_s" in section:  # full runs only (a quick run launches the first case alone)
        timeout = section["hang_timeout_s"]
        rows += [
            (
                f"rank 1 hangs (collective timeout {timeout:g} s)",
                f"{section['hung_rank_s']} s ({section['hung_rank_beyond_timeout_s']:+} s "
                f"beyond the timeout)",
                1,
            ),
            ("launcher SIGKILLed: both workers gone", f"{section['killed_launcher_s']} s", ""),
        ]
        said.append(section["hung_rank_report"])
    reports = _table(("fault (2 CPU processes)", "until reported / stopped", "exit status"), rows)
    ckpt = section["checkpoints"]
    checkpoints = _table(
        ("model", "checkpoint MiB", "epoch s", "write s", "write / epoch", "read (resume) s"),
        [
            (
                ckpt["model"],
                ckpt["checkpoint_mib"],
                ckpt["epoch_s"],
                ckpt["checkpoint_write_s"],
                f"{ckpt['overhead_percent']}%",
                ckpt["checkpoint_read_s"],
            )
        ],
    )
    return (
        f"Medians of {launches} launch(es) per case; the reports:\n\n"
        + "".join(f"- `{report}`\n" for report in said)
        + "\n"
        f"{reports}\n\nCheckpoint at every epoch end ({ckpt['steps_per_epoch']} steps an "
        f"epoch, medians):\n\n{checkpoints}"
    )


def _flops(section: dict[str, Any]) -> str:
    met = {True: "holds", False: "misses", None: "quick run, no verdict"}[section.get("met")]
    table = _table(
        (
            "steps per run",
            "fastest counted s",
            "fastest not counted s",
            "ratio (fastest)",
            "target",
            "ratio (medians, pairs)",
            "one-step fit s",
        ),
        [
            (
                section.get("steps_per_run"),
                section["counted_fastest_s"],
                section["plain_fastest_s"],
                f"{section['ratio_fastest']:g}x",
                f"<= {section.get('target')}x: {met}",
                f"{section['ratio']:g}x, {section['ratio_paired']:g}x",
                f"{section['one_step_fit_counted_median_s']} counted, "
                f"{section['one_step_fit_plain_median_s']} not",
            )
        ],
    )
    return f"{section.get('model', '')}, {section.get('repeats')} runs each.\n\n{table}"


def _ratio(summary: dict[str, Any]) -> str:
    low, high = summary["ci95"]
    return (
        f"{summary['median']:g}x (quartiles {summary['p25']:g}-{summary['p75']:g}x; median's "
        f"95% interval {low:g}-{high:g}x; {summary['pairs']} pairs)"
    )


def _kernels(section: dict[str, Any]) -> str:
    fallback, translation = section["fallback"], section["translation"]
    if "skipped" in fallback:
        first = f"_the fallback's part skipped: {fallback['skipped']}_"
    else:
        rows = [
            (
                model["model"],
                model["cpu_ms_per_step"],
                model["fallback_ms_per_step"],
                _ratio(model["ratio"]),
                f"{model['fallback_calls_per_step']:g}",
            )
            for model in fallback["models"].values()
        ]
        headers = ("step", "CPU ms", f"{fallback['device']} + fallback ms",
                   "ratio, pair by pair", "calls on the CPU a step")  # fmt: skip
        first = (
            f"A step on {fallback['device']} with ACCELCTL_CPU_FALLBACK=1 against the same step "
            f"on the CPU, one of each in turn (medians):\n\n{_table(headers, rows)}\n\n"
            f"Ran on the CPU: {', '.join(sorted(fallback['fallen_back'])) or 'nothing'}."
        )
    ms = translation["ms_per_step"]
    verdict = "within" if translation["within_noise"] else "outside"
    rows = [
        ("as it is / without its try", ms["translated"], ms["untranslated"],
         _ratio(translation["ratio_translated_untranslated"])),
        ("as it is / as it is (the noise)", ms["translated"], ms["translated_again"],
         _ratio(translation["ratio_translated_translated"])),
    ]  # fmt: skip
    table = _table(("steps compared", "first ms", "second ms", "ratio, pair by pair"), rows)
    ns = translation["try_statement_ns"]
    return (
        f"{first}\n\nThe error translation on a step that raises nothing: "
        f"{translation['fits']} fits of the Trainer on the CPU ({translation['model']}, "
        f"{translation['steps_per_fit']} steps), its steps taking turns (medians):\n\n{table}"
        f"\n\nVerdict: {verdict} the noise. The try statement alone, around a call that does "
        f"nothing: {ns['try_except']} ns a call, {ns['bare']} ns bare."
    )


def _peers(section: dict[str, Any]) -> str:
    from .peers_report import render_peers

    return render_peers(section)


def render(results: dict[str, Any]) -> str:
    """All sections present in ``results`` as Markdown."""
    parts = [f"## Machine\n\n{_machine(results['machine'])}"]
    sections = results["sections"]
    renderers = [
        ("startup", "CLI start-up", _startup),
        ("scaling", "Scaling with installed plugins", _scaling),
        ("dispatch", "Hook dispatch", _dispatch),
        ("trainer", "Trainer overhead", _trainer),
        ("faults", "Faults and checkpoints", _faults),
        ("distributed", "Several processes of one accelerator", _distributed),
        ("fsdp", "Sharded training (FSDP2)", _fsdp),
        ("fsdp-openreg", "Sharded training (FSDP2) on openreg", _fsdp),
        ("discovery", "Finding the plugins", _discovery),
        ("flops", "Counting the model's FLOPs (flops_per_second, mfu)", _flops),
        ("kernels", "Missing kernels: the CPU fallback and the error translation", _kernels),
        ("peers", "Against the peers: one training through every path", _peers),
        ("deepspeed", "DeepSpeed through the bridge (ZeRO-2)", _deepspeed),
    ]
    for key, title, renderer in renderers:
        if key not in sections:
            continue
        section = sections[key]
        body = f"_failed: {section['error']}_" if "error" in section else renderer(section)
        parts.append(f"## {title}\n\n{body}")
    return "\n\n".join(parts) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the Markdown of the results file named on the command line."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m bench.report RESULTS.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    try:
        results = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        print(f"error: cannot read results file {path}: {exc}", file=sys.stderr)
        return 1
    print(render(results), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
