"""The pytest side of ``scripts/cpuprof/run``: each test's in-process CPU, start and end."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import _accelctl_cpuprof as cpuprof
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpuprof.is_worker = True
    cpu, start = time.process_time(), time.time()
    yield
    if cpuprof.LOG:
        record = {"kind": "inproc", "pid": os.getpid(), "test": item.nodeid, "start": start}
        cpuprof.write({**record, "end": time.time(), "cpu": time.process_time() - cpu})
