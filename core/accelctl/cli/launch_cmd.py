"""``accelctl launch``: run a training script on one process per selected device (torchrun)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re

import click

from .._contract import settings
from .._contract.device_specs import devices_spec
from .._launching.cores import cpu_oversubscription
from .._launching.failures import LaunchFailedError
from .._launching.options import NodeOptionError, plan_nodes
from .._launching.scripts import interrupted_anywhere, launch_script
from .._launching.supervision import LaunchInterruptedError
from ._options import accelerator_option, devices_option
from ._selecting import resolve_in_time

#: One label of a host name (RFC 1123): letters, digits and inner hyphens, 63 at most.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _check_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Check that --master-addr is a host name or an IP address.

    Checked here because torch's rendezvous would say so only once the processes start."""
    if value is None:
        return None
    given = value.strip()
    host = given[1:-1] if given.startswith("[") and given.endswith("]") else given  # [IPv6]
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return given
    labels = host.removesuffix(".").split(".")
    if 0 < len(host) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels):
        return given
    shown = repr(value) if len(value) <= 60 else repr(value[:60]) + "..."
    raise click.BadParameter(
        f"{shown} is not a host name or an IP address: give the address of the machine "
        "started with --node-rank 0, such as node0.cluster, 10.0.0.1 or fd00::1",
        ctx=ctx,
        param=param,
    )


@click.command(
    "launch",
    # Options end at SCRIPT: everything after it belongs to the script, options included. An
    # unknown option before it is a usage error (click's "No such option", with the nearest).
    context_settings={"allow_interspersed_args": False},
)
@accelerator_option
@devices_option("; one process per device")
@click.option("--cpu", is_flag=True, help="Same as --accelerator cpu.")
@click.option(
    "--nnodes",
    type=click.IntRange(min=1),
    default=None,
    help="Machines taking part; start the same command on each [default: 1, or the SLURM job "
    "step's nodes under srun].",
)
@click.option(
    "--node-rank",
    type=click.IntRange(min=0),
    default=None,
    help="This machine's rank, 0 to NNODES-1 (0 hosts the rendezvous) [default: 0, or "
    "SLURM_NODEID under srun].",
)
@click.option(
    "--master-addr",
    default=None,
    callback=_check_address,
    help="Address of the machine with --node-rank 0 (required with --nnodes > 1) [default under "
    "srun: MASTER_ADDR, else the job step's first node].",
)
@click.option(
    "--master-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Rendezvous port on --master-addr [default: a free port on one machine, else 29500; "
    "under srun: MASTER_PORT, else one derived from SLURM_JOB_ID].",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Restart all processes up to N times when one fails (torchrun's elastic restarts); "
    "accelctl.Trainer resumes from its last checkpoint.",
)
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def launch_command(
    ctx: click.Context,
    accelerator: str,
    devices: str,
    cpu: bool,
    nnodes: int | None,
    node_rank: int | None,
    master_addr: str | None,
    master_port: int | None,
    max_restarts: int,
    script: str,
    script_args: tuple[str, ...],
) -> None:
    """Run SCRIPT [ARGS ...] on the selected accelerator, one process per device.

    The selection is made once, here, and handed to every process (ACCELCTL_ACCELERATOR,
    ACCELCTL_DEVICES), so that accelctl.Trainer() in SCRIPT runs on it. One device: SCRIPT runs
    in one process. Several, or several machines: torchrun starts them. When a process fails
    the others are stopped and launch exits with that process's status, naming the first that
    failed; with --max-restarts N the group is restarted instead, up to N times. Ctrl-C (or
    SIGTERM) stops every process and exits 130 (143); processes die with a killed launcher.
    Under srun (one task per node) the machines are read from the SLURM job step.

    \b
    Examples:
      accelctl launch --cpu --devices 2 train.py --epochs 3
      accelctl launch --accelerator cuda --devices 0,1 train.py
      accelctl launch --cpu --devices 4 --max-restarts 3 train.py
      accelctl launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --devices 8 train.py
      srun --nodes 2 --ntasks-per-node 1 accelctl launch --devices 8 train.py
    """
    if cpu:
        if accelerator.strip().lower() not in ("auto", "cpu"):
            raise click.UsageError(
                f"--cpu means --accelerator cpu; it cannot be combined with "
                f"--accelerator {accelerator}"
            )
        accelerator = "cpu"
    try:
        plan_nodes(nnodes, node_rank, master_addr, master_port)
    except NodeOptionError as exc:
        if exc.option is None:
            raise click.UsageError(exc.problem) from None
        raise click.BadParameter(exc.problem, param_hint=exc.option) from None
    try:
        with interrupted_anywhere():  # a signal while the accelerator is chosen: the same line
            # Selected under the deadline, as for `resolve`: a stuck plugin is an error, not a hang.
            selection = resolve_in_time(accelerator, devices)
            crowded = cpu_oversubscription(selection, option="--devices ")
    except LaunchInterruptedError as exc:
        click.echo(f"accelctl launch: {exc}", err=True)
        ctx.exit(exc.exit_code)
    if crowded:  # a choice the user may mean (trying a multi-process set-up): said, not refused
        click.echo(f"accelctl launch: warning: {crowded}", err=True)
    debug = bool(ctx.find_root().params.get("debug"))
    if debug:  # the processes' accelctl errors with their tracebacks, as the CLI's own
        os.environ[settings.DEBUG] = "1"
    try:
        launch_script(
            script,
            script_args,
            accelerator=selection.accelerator,
            devices=devices_spec(selection.parsed),
            typed_devices=selection.given_devices,  # as typed, for the lines an error suggests
            nnodes=nnodes,
            node_rank=node_rank,
            master_addr=master_addr,
            master_port=master_port,
            quiet=not debug,
            max_restarts=max_restarts,
        )
    except (LaunchFailedError, LaunchInterruptedError) as exc:
        # The child printed its own traceback (an accelctl error: none); the report is the line
        # that names it.
        click.echo(f"accelctl launch: {exc}", err=True)
        ctx.exit(exc.exit_code)
