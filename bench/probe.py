"""Run a Python command in this process and, at exit, write the modules it imported to a file.

The modules are ``sys.modules``' names: ``python bench/probe.py OUT (-c CODE | SCRIPT) [ARGS ...]``.

``python -X importtime`` would be the obvious tool, but it does not see modules loaded through
``importlib.import_module``, which is how entry points (and so plugins) are loaded. Standard
library only; the probe's own imports are left out of the list. A command that forks a child to
ask the plugins in (``accelctl list``) imports them there: each forked child writes its own list
when it ends through ``os._exit``, and the command's list is the union.
"""

import atexit
import glob
import json
import os
import runpy
import sys

_OWN = {"atexit", "glob", "json", "runpy"}


def _write(out: str, before: set[str]) -> None:
    names = {name for name in sys.modules if name not in _OWN or name in before}
    for path in glob.glob(f"{glob.escape(out)}.child-*"):  # the forked children's
        with open(path) as handle:
            names.update(json.load(handle))
        os.remove(path)
    with open(out, "w") as handle:
        json.dump(sorted(names), handle)


def _in_child(out: str, before: set[str]) -> None:
    """In a forked child: write its modules when it ends through ``os._exit``."""
    real_exit = os._exit

    def exit_writing(status: int) -> None:
        names = sorted(name for name in sys.modules if name not in _OWN or name in before)
        with open(f"{out}.child-{os.getpid()}", "w") as handle:
            json.dump(names, handle)
        real_exit(status)

    os._exit = exit_writing


def main() -> None:
    """Run the command named by ``sys.argv[2:]`` as ``__main__``."""
    before = set(sys.modules) - _OWN
    out, target, *rest = sys.argv[1:]
    atexit.register(_write, out, before)
    os.register_at_fork(after_in_child=lambda: _in_child(out, before))
    if target == "-c":
        code, *args = rest
        sys.argv = ["-c", *args]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = [target, *rest]
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
