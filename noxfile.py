"""The test sessions: one environment per framework a bridge adapts, each at its window's ends.

Each bridge on the oldest and the newest release of its window
(``accelctl/integrations/_shared/versions.py``).

    nox                         every session (what ``bash scripts/test`` and CI run)
    nox -l                      the sessions, with what each installs
    nox -s lightning-newest     one session; ``-t lightning`` all of Lightning's
    nox -t below                the refusals of releases below each window
    nox -s core -- -k stats     arguments after ``--`` go to pytest

Why nox: its sessions are Python, so the windows' ends come from the same ``pyproject.toml``
extras users install, sessions are made in a loop, and its uv backend builds each environment
from uv's cache in seconds (tox would need a plugin for uv, and an ini or toml table per
framework and end). Every session installs the pinned CPU build of torch first (from the folder
of wheels pip is told about, ``PIP_FIND_LINKS``, where there is one), then the core, every
in-repo plugin, the HPU example, PyTorch's ``torch_openreg`` test backend and the ``test``
dependency group; then its framework:

- ``*-oldest``: the oldest minor of the window, as the extra's lower bound names it;
- ``*-newest``: the extra itself, unpinned, as ``pip install 'accelctl[lightning]'`` gives a
  user today; ``test_framework_window.py`` of its tests fails there the day a release
  outside the window ships;
- ``*-below``: releases below the window (``BELOW``), each installed with its dependencies into
  a folder of its own (``uv pip install --target``, torch held to the session's build), and
  tests/below, which imports the bridge on each and asserts what its shape checks find: refused
  naming what is missing or what the import raised, or adapted with one warning.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import nox

nox.needs_version = ">=2025.5.1"
nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
PYTHON = "3.11"  # the torch_openreg wheels are built for CPython 3.11 and torch 2.13.0 only
TORCH = "torch==2.13.0"
#: The torch_openreg the tests marked ``openreg`` run on (its collective backend ``occl``); the
#: tests of a device without one install 0.0.1 themselves (tests/openregmachine.py).
OPENREG = "0.0.3"
#: 4 workers on 2 cores: most tests wait on the processes they start. Each worker takes a whole
#: module (or test class) at a time (``--dist loadscope``), in the order of the root conftest.py:
#: the cluster tests, then the slow ones, then the rest (``--no-loadscope-reorder``).
PYTEST = ("-n", os.environ.get("ACCELCTL_TEST_WORKERS", "4"), "--dist", "loadscope",
          "--no-loadscope-reorder", "--durations=15")  # fmt: skip
UNDER_CI = os.environ.get("CI") == "true"


def find_backends() -> Path:
    """Return the folder of PyTorch's torch_openreg wheels.

    ``$ACCELCTL_TEST_BACKENDS`` where set, else ``../shared/backends`` beside this checkout, else
    beside the checkout this one was cloned from (``git clone . /tmp/x``, as CI may clone).
    """
    if os.environ.get("ACCELCTL_TEST_BACKENDS"):
        return Path(os.environ["ACCELCTL_TEST_BACKENDS"])
    beside = ROOT.parent / "shared" / "backends"
    if not beside.is_dir():
        origin = subprocess.run(
            ["git", "config", "--get", "remote.origin.url"],
            capture_output=True, text=True, cwd=ROOT, check=False,
        ).stdout.strip()  # fmt: skip
        if origin and (Path(origin).parent / "shared" / "backends").is_dir():
            return (Path(origin).parent / "shared" / "backends").resolve()
    return beside


BACKENDS = find_backends()


def _find_links() -> dict[str, str]:
    """Return the folder of wheels pip is told about, for uv, which reads no pip configuration.

    The project's machines keep the CPU build of torch there.
    """
    folder = os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS")
    return {"UV_FIND_LINKS": folder} if folder else {}


def _lowest(requirement: str) -> str:
    """``"lightning>=2.3"`` -> ``"lightning==2.3.*"``: the oldest minor of the window."""
    match = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)>=(\d+\.\d+)", requirement)
    if match is None:
        raise ValueError(f"{requirement!r}: an extra names its window as 'name>=X.Y'")
    return f"{match.group(1)}=={match.group(2)}.*"


def install(
    session: nox.Session,
    *extras: str,
    also: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> None:
    """Install torch, then the project with ``extras``, its plugins, the test group and ``also``.

    torch first so that no range pulls another build; ``also`` names requirements (an oldest
    session's pins); ``env`` is set for the installs (a framework's build switches).
    """
    session.install(TORCH, env=_find_links())
    projects = [str(p.parent) for p in sorted(ROOT.glob("plugins/*/pyproject.toml"))]
    projects += [str(p.parent) for p in sorted(ROOT.glob("examples/accelctl-*/pyproject.toml"))]
    editables = [arg for project in projects for arg in ("-e", project)]
    core = f".[{','.join(extras)}]" if extras else "."
    group = nox.project.dependency_groups(PYPROJECT, "test")
    session.install("-e", core, *editables, *group, *also, env={**_find_links(), **(env or {})})
    wheels = sorted(BACKENDS.glob(f"torch_openreg-{OPENREG}-*.whl"))
    if not wheels:
        message = f"no torch_openreg-{OPENREG} wheel in {BACKENDS} (ACCELCTL_TEST_BACKENDS)"
        if UNDER_CI:
            session.error(message)
        session.warn(f"{message}: the openreg tests will skip")
        return
    session.install("--no-deps", "--reinstall", str(wheels[0]))


def pytest(session: nox.Session, *paths: str) -> None:
    session.run(
        "python", "-m", "pytest", *PYTEST, *(session.posargs or paths),
        env={"ACCELCTL_TEST_BACKENDS": str(BACKENDS)},
    )  # fmt: skip


@nox.session(python=PYTHON)
def core(session: nox.Session) -> None:
    """The core, in-repo plugins, kit, Trainer and launcher, CLI, openreg backend and bench.

    scikit-learn too, for examples/cv_example.py.
    """
    install(session, also=("scikit-learn",))
    pytest(session)  # pyproject's testpaths, less the frameworks' folders (norecursedirs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff and mypy --strict.

    The bridges typed against the newest Lightning and Accelerate, the exporter and the plot against
    prometheus-client and matplotlib.
    """
    session.install(TORCH, env=_find_links())
    group = nox.project.dependency_groups(PYPROJECT, "lint")
    extras = "lightning,accelerate,testing,prometheus,plot"
    session.install("-e", f".[{extras}]", *group, env=_find_links())
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


#: Each framework session: the extras it installs, the tests it runs.
FRAMEWORKS = {
    "lightning": (("lightning",), "tests/lightning"),
    "hf": (("accelerate", "transformers"), "tests/hf"),
    "ray": (("ray",), "tests/ray"),
    # DeepSpeed's own engine, and the Lightning, Accelerate and transformers paths to it
    # (their bridges on DeepSpeed's: docs/deepspeed.md), each framework at the same end of its
    # window as DeepSpeed (transformers' extra brings Accelerate's): the oldest session checks
    # the four floors together, the newest the releases a user gets today.
    "deepspeed": (("deepspeed", "lightning", "transformers"), "tests/deepspeed"),
}
#: What an oldest minor needs beside it: Lightning 2.3 imports pkg_resources, which setuptools
#: 81 removed (2.4 no longer does); the DeepSpeed session's oldest installs Lightning 2.3 too.
OLDEST_NEEDS = {"lightning": ("setuptools<81",), "deepspeed": ("setuptools<81",)}
#: What a framework's install needs set: DeepSpeed compiles none of its ops at install (its
#: bridge's devices have no build of them; docs/deepspeed.md).
INSTALL_ENV = {"deepspeed": {"DS_BUILD_OPS": "0"}}


def _framework_session(name: str, end: str) -> None:
    extras, tests = FRAMEWORKS[name]
    requirements = sorted({r for extra in extras for r in EXTRAS[extra]})
    if end == "oldest":
        pins = tuple(_lowest(r) for r in requirements) + OLDEST_NEEDS.get(name, ())
        described = ", ".join(pins)
    else:
        described = ", ".join(requirements) + " (the newest releases)"

    def run(session: nox.Session) -> None:
        env = INSTALL_ENV.get(name)
        if end == "oldest":
            install(session, also=pins, env=env)
        else:
            install(session, *extras, env=env)
        pytest(session, tests)

    run.__doc__ = f"{tests} on {described}."
    nox.session(name=f"{name}-{end}", python=PYTHON, tags=[name])(run)


for _name in FRAMEWORKS:
    for _end in ("oldest", "newest"):
        _framework_session(_name, _end)


#: Releases below each window, on which tests/below imports each bridge and asserts what it does:
#: one minor below the window's oldest, and the oldest release of the previous major line that
#: installs beside torch 2.13 on Python 3.11 (Lightning 1.8.0.post1; Accelerate 0.0.1;
#: transformers 4.23.0, as 4.0 to 4.22 need tokenizers without Python 3.11 wheels; Ray has no 1.x
#: for Python 3.11, so its oldest that installs, 2.3.0), and the releases issue 46 met crashing
#: inside the bridges (Accelerate 1.0.0, 1.3.0; Lightning 2.2.5 is the one below).
BELOW = {
    "lightning": ("lightning==2.2.5", "lightning==1.8.0.post1"),
    "hf": ("accelerate==1.12.0", "accelerate==1.3.0", "accelerate==1.0.0", "accelerate==0.0.1",
           "transformers==5.20.2", "transformers==4.23.0"),
    "ray": ("ray[train]==2.56.1", "ray[train]==2.3.0"),
}  # fmt: skip
#: Installed beside each release below: the old ones import ``pkg_resources``, which Python
#: 3.11's own venv has (it seeds setuptools) and setuptools 81 removed; torch 2.13 needs >=77.
BELOW_NEEDS = ("setuptools<81",)


def _below_session(name: str) -> None:
    extras, _ = FRAMEWORKS[name]

    def run(session: nox.Session) -> None:
        # The newest extras for what the releases below do not bring (transformers' bridge is
        # built on Accelerate's: a transformers below runs beside the newest Accelerate).
        install(session, *(extras if name != "ray" else ()))
        # Each release with its dependencies in a folder of its own (a venv each would install
        # torch and the project again), torch held to the session's build by a constraint.
        constraints = Path(session.create_tmp()) / "torch.txt"
        constraints.write_text(f"{TORCH}\n")
        folders = []
        for release in BELOW[name]:
            requirement = re.sub(r"\[.*\]", "", release)
            folder = Path(session.create_tmp()) / "below" / requirement.replace("==", "-")
            wanted = " ".join((release, *BELOW_NEEDS, TORCH))
            stamp = folder / "accelctl-below.txt"
            if not stamp.is_file() or stamp.read_text() != wanted:
                shutil.rmtree(folder, ignore_errors=True)
                session.run("uv", "pip", "install", "--quiet", "--target", str(folder),
                            release, *BELOW_NEEDS, "--constraint", str(constraints),
                            env=_find_links())  # fmt: skip
                stamp.write_text(wanted)
            folders.append(str(folder))
        # In this process (-n 0): one import of a bridge each, less than starting xdist's workers.
        session.run(
            "python", "-m", "pytest", "-n", "0", "--durations=15",
            *(session.posargs or ("tests/below",)),
            env={"ACCELCTL_BELOW_RELEASES": os.pathsep.join(folders),
                 "ACCELCTL_TEST_BACKENDS": str(BACKENDS)},
        )  # fmt: skip

    run.__doc__ = f"tests/below on {', '.join(BELOW[name])}, each with its dependencies."
    nox.session(name=f"{name}-below", python=PYTHON, tags=[name, "below"])(run)


for _name in BELOW:  # DeepSpeed's bridge has none yet (its window's floor is a behaviour's)
    _below_session(_name)


#: The frameworks the bench's ``peers`` section trains through, side by side in one environment.
BENCH_EXTRAS = ("lightning", "accelerate", "transformers", "deepspeed", "bench")


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """The ``peers`` section, with Lightning, Accelerate, transformers and DeepSpeed together.

    ``python -m bench --sections peers --output bench/results/peers.json`` (arguments after ``--``
    replace those), in one environment: not part of ``nox`` alone nor of ``bash scripts/test``
    (docs/performance.md, "Against the peers").
    """
    install(session, *BENCH_EXTRAS, env=INSTALL_ENV["deepspeed"])
    session.run(
        "python", "-m", "bench",
        *(session.posargs or ("--sections", "peers", "--output", "bench/results/peers.json")),
        env={"ACCELCTL_TEST_BACKENDS": str(BACKENDS)},
    )  # fmt: skip


@nox.session(python=PYTHON)
def slurm(session: nox.Session) -> None:
    """tests/slurm on a two-node SLURM cluster the tests start.

    scripts/setup-machine installs Debian's slurm-wlm first, as root.
    """
    if os.geteuid() == 0:
        session.run("bash", "scripts/setup-machine", external=True)
    elif UNDER_CI:
        session.error("not root, so no SLURM here: sudo bash scripts/setup-machine")
    install(session)
    pytest(session, "tests/slurm")
