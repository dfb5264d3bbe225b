"""The exact-resume property on several processes, under ``accelctl launch``.

``accelctl launch --cpu --devices 2 resume_run.py OUT ddp|fsdp``.

Every process draws the same examples (hypothesis, derandomized, not shrunk: all stay in step, for
the fits are collective), runs each stopped and resumed fit and compares its final weights with the
uninterrupted fit's of its loader; a difference fails the launch. A failure ends its process at
once, its traceback printed: hypothesis would go on to the next example (or run the failing one
again) in that process alone, while the others would wait for it in the failed one's fits until the
collective timeout. Rank 0 writes ``OUT/checked.txt``, a line per example checked.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any

from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from resume_cases import (
    EPOCHS,
    EVERY,
    SHARDED_LOADERS,
    STOPS,
    Case,
    differences,
    resume_point,
    steps_per_epoch,
    stopped_and_resumed,
    uninterrupted,
    world,
)


def main(out: Path, fsdp: bool) -> None:
    expected: dict[str, Any] = {}
    checked: list[str] = []
    total = EPOCHS * steps_per_epoch()
    counter = iter(range(10**6))

    @settings(
        max_examples=4,
        deadline=None,
        database=None,
        derandomize=True,  # the same examples in every process
        phases=[Phase.explicit, Phase.generate],  # no shrinking: every process in step
    )
    @given(
        st.sampled_from(SHARDED_LOADERS),
        st.sampled_from(STOPS),
        st.integers(0, 10**6),
    )
    @example("generator", "epoch-end", 1)
    @example("distributed", "step", EVERY + 2)
    @example("shuffle", "signal", 3)
    def resumes_exactly(loader: str, stop: str, seed: int) -> None:
        try:
            check(loader, stop, seed)
        except BaseException:  # hypothesis catches even SystemExit: leave without it
            traceback.print_exc()
            print(f"rank {world()[0]}: the example above failed", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(1)

    def check(loader: str, stop: str, seed: int) -> None:
        low, high = {"epoch-end": (1, EPOCHS - 1), "step": (EVERY + 1, total)}.get(stop, (1, total))
        case = Case(loader, stop, low + seed % (high - low + 1), fsdp)
        if loader not in expected:
            expected[loader] = uninterrupted(loader, fsdp, out / f"whole-{loader}")
        weights, point = stopped_and_resumed(case, out / f"case-{next(counter)}")
        if point is not None:  # rank 0's reading (see stopped_and_resumed)
            assert point["global_step"] == resume_point(case), (case, point)
        assert differences(weights, expected[loader]) == [], (case, point)
        checked.append(f"{case.loader} {case.stop} {case.at} from {point}")

    resumes_exactly()
    if world()[0] == 0:
        (out / "checked.txt").write_text("".join(f"{line}\n" for line in checked))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] == "fsdp")
