"""Run a Python command in this process and, at exit, write the names of every module it imported
(``sys.modules``) to a file: ``python bench/probe.py OUT (-c CODE | SCRIPT) [ARGS ...]``.

``python -X importtime`` would be the obvious tool, but it does not see modules loaded through
``importlib.import_module``, which is how entry points (and so plugins) are loaded. Standard
library only; the probe's own imports are left out of the list.
"""

import atexit
import json
import runpy
import sys

_OWN = {"atexit", "json", "runpy"}


def _write(out: str, before: set[str]) -> None:
    names = sorted(name for name in sys.modules if name not in _OWN or name in before)
    with open(out, "w") as handle:
        json.dump(names, handle)


def main() -> None:
    """Run the command named by ``sys.argv[2:]`` as ``__main__``."""
    before = set(sys.modules) - _OWN
    out, target, *rest = sys.argv[1:]
    atexit.register(_write, out, before)
    if target == "-c":
        code, *args = rest
        sys.argv = ["-c", *args]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = [target, *rest]
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
