"""The Trainer's parts on their own: launcher variables, sharding, batches, the devices hand-off."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset, WeightedRandomSampler

import accelctl
from accelctl._choice.process_environment import ProcessEnvironment
from accelctl._contract.device_specs import devices_spec
from accelctl._contract.errors import ProcessSetupError
from accelctl._launching.handoff import launch_command_line
from accelctl._training.data import DataLoaderError, batch_size, move_to_device, shard_loader
from accelctl.launcher import RankFailure


def test_process_environment_reads_torchruns_variables() -> None:
    assert ProcessEnvironment.from_environ({}) == ProcessEnvironment()
    assert not ProcessEnvironment.from_environ({"LOCAL_RANK": "1"}).launched  # partial: alone
    env = ProcessEnvironment.from_environ(
        {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}
    )
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (5, 1, 8, 4)
    assert env.launched and env.distributed


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"RANK": "x", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "RANK='x' is not a whole number"),
        ({"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "inconsistent launcher variables"),
    ],
)
def test_bad_launcher_variables_are_named(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ProcessSetupError, match=message):
        ProcessEnvironment.from_environ(environ)


@pytest.mark.parametrize(("parsed", "spec"), [(2, "2"), ([0, 2], "0,2"), ([1], "1,"), ((3,), "3,")])
def test_devices_spec_parses_back_to_the_same_devices(parsed: Any, spec: str) -> None:
    assert devices_spec(parsed) == spec
    if isinstance(parsed, int):
        assert accelctl.parse_process_count(spec, accelerator="cpu") == parsed
    else:
        assert accelctl.parse_indexed_devices(spec, visible=4, accelerator="x") == list(parsed)


def test_launch_command_line_quotes_arguments() -> None:
    command = launch_command_line("cuda", "0,1", ["my train.py", "--name", "a b"])
    assert command == "accelctl launch --accelerator cuda --devices 0,1 'my train.py' --name 'a b'"


def _ids(loader: Any) -> list[int]:
    return [int(i) for (batch,) in loader for i in batch]


def test_training_shards_are_disjoint_reshuffled_per_epoch_and_keep_the_loader_options() -> None:
    data = TensorDataset(torch.arange(20))
    loader = DataLoader(data, batch_size=3, shuffle=True, drop_last=True)
    shards = [shard_loader(loader, rank=r, world_size=2, train=True) for r in (0, 1)]
    assert all(
        isinstance(s, DataLoader) and isinstance(s.sampler, DistributedSampler) for s in shards
    )
    assert all(s.batch_size == 3 and s.drop_last for s in shards)  # type: ignore[attr-defined]
    for shard in shards:
        shard.sampler.set_epoch(0)  # type: ignore[attr-defined]
    epoch0 = [_ids(s) for s in shards]
    assert not set(epoch0[0]) & set(epoch0[1])
    for shard in shards:
        shard.sampler.set_epoch(1)  # type: ignore[attr-defined]
    assert [_ids(s) for s in shards] != epoch0


def test_evaluation_shards_see_every_sample_exactly_once() -> None:
    loader = DataLoader(TensorDataset(torch.arange(7)), batch_size=2)
    ids = [_ids(shard_loader(loader, rank=r, world_size=3, train=False)) for r in range(3)]
    assert sorted(i for shard in ids for i in shard) == list(range(7))


def test_loaders_that_cannot_be_sharded_say_what_to_do() -> None:
    data = TensorDataset(torch.arange(8))
    with pytest.raises(DataLoaderError, match="got list"):
        shard_loader([1, 2], rank=0, world_size=2, train=True)
    weighted = DataLoader(data, batch_size=2, sampler=WeightedRandomSampler([1.0] * 8, 8))
    with pytest.raises(DataLoaderError, match=r"WeightedRandomSampler.*DistributedSampler"):
        shard_loader(weighted, rank=0, world_size=2, train=True)
    own = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, 2, 1))
    assert shard_loader(own, rank=1, world_size=2, train=True) is own  # the user's: untouched
    assert shard_loader(weighted, rank=0, world_size=1, train=True) is weighted  # alone


def test_batches_move_whole_and_are_counted() -> None:
    Pair = namedtuple("Pair", "x y")
    batch = {"a": Pair(torch.zeros(5, 2), [torch.ones(5), "label"]), "n": 3}
    moved = move_to_device(batch, torch.device("meta"))
    assert isinstance(moved["a"], Pair) and moved["a"].x.device.type == "meta"
    assert moved["a"].y[0].device.type == "meta" and moved["a"].y[1] == "label"
    assert moved["n"] == 3
    assert batch_size(batch) == 5
    assert batch_size(("text", 4)) == 1


def test_a_failure_without_an_error_file_reports_the_exit() -> None:
    failure = RankFailure(rank=2, world_size=4, returncode=-9, error="stopped by a signal")
    assert failure.exit_code == 137
    assert failure.describe() == "rank 2 of 4 failed (killed by SIGKILL): stopped by a signal"


def test_the_process_that_recorded_an_exception_is_blamed_not_a_signalled_bystander(
    tmp_path: Path,
) -> None:
    import json
    import time

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    error_file = tmp_path / "rank1.json"
    error_file.write_text(
        json.dumps(
            {
                "message": {
                    "message": "ValueError: boom in rank 1",
                    "extraInfo": {
                        "py_callstack": "Traceback ...",
                        "timestamp": str(int(time.time())),
                    },
                }
            }
        )
    )
    # Rank 0 was SIGTERMed by torchrun after rank 1 failed (torch records it second): no error
    # file, a whole-second stamp that sorts before rank 1's file written later in the same second.
    bystander = ProcessFailure(local_rank=0, pid=1, exitcode=-15, error_file=str(tmp_path / "none"))
    culprit = ProcessFailure(local_rank=1, pid=2, exitcode=1, error_file=str(error_file))
    bystander.timestamp = culprit.timestamp - 1
    failure = RankFailure.from_child_failed(
        ChildFailedError("train", {1: culprit, 0: bystander}), 2
    )
    assert (failure.rank, failure.returncode) == (1, 1)
    assert failure.describe() == "rank 1 of 2 failed (exit code 1): ValueError: boom in rank 1"


def _error_file(path: Path, message: str) -> str:
    import json
    import time

    extra = {"py_callstack": "Traceback ...", "timestamp": str(int(time.time()))}
    path.write_text(json.dumps({"message": {"message": message, "extraInfo": extra}}))
    return str(path)


GLOO_PEER_LOST = (
    "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:3505. "
    "This is typically caused by a remote worker crashing."
)


@pytest.mark.parametrize("exitcode", [-9, 3], ids=["SIGKILL", "sys.exit(3)"])
def test_a_rank_that_died_without_a_record_is_blamed_not_the_survivor_that_recorded_one(
    tmp_path: Path, exitcode: int
) -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    dead = ProcessFailure(local_rank=1, pid=2, exitcode=exitcode, error_file=str(tmp_path / "x"))
    gloo = _error_file(tmp_path / "rank0.json", GLOO_PEER_LOST)
    # The survivor recorded gloo's error, then torchrun SIGTERMed it (recorded second)...
    stopped = ProcessFailure(local_rank=0, pid=1, exitcode=-15, error_file=gloo)
    failure = RankFailure.from_child_failed(ChildFailedError("t", {1: dead, 0: stopped}), 2)
    assert (failure.rank, failure.returncode) == (1, exitcode)
    # ...or it exited by itself before torch's next poll (both recorded at once, rank order).
    exited = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=gloo)
    failure = RankFailure.from_child_failed(ChildFailedError("t", {0: exited, 1: dead}), 2)
    assert failure.rank == 1
    assert failure.describe().startswith(
        "rank 1 of 2 failed (killed by SIGKILL)"
        if exitcode < 0
        else "rank 1 of 2 failed (exit code 3)"
    )


def test_a_rank_sigtermed_first_is_blamed_when_torchrun_stopped_the_others(tmp_path: Path) -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    first = ProcessFailure(local_rank=1, pid=2, exitcode=-15, error_file=str(tmp_path / "x"))
    then = ProcessFailure(local_rank=0, pid=1, exitcode=-15, error_file=str(tmp_path / "y"))
    failure = RankFailure.from_child_failed(ChildFailedError("t", {1: first, 0: then}), 2)
    assert failure.rank == 1 and failure.exit_code == 143
