"""HF Accelerate's FSDP2 plugin through the accelctl bridge, under a launcher with 2 processes.

``accelctl launch --accelerator A --devices 2 fsdp_accelerate_run.py OUT``.

Each process writes ``OUT/rank<r>.json`` (what ran where, how the parameters were held) and
``OUT/rank<r>.pt`` (the full weights, gathered).
"""

import sys
from pathlib import Path

import torch
from accelerate import FullyShardedDataParallelPlugin
from fsdp_shared import EPOCHS, LEARNING_RATE, full_weights, loader, make_net, sharding, write
from scriptend import exit_without_teardown

from accelctl.integrations.accelerate import Accelerator

OUT = Path(sys.argv[1])

accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
net = make_net()
# Made before prepare, as Accelerate's examples do: it must step the sharded parameters.
optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
net, optimizer, data = accelerator.prepare(net, optimizer, loader())
losses, seen = [], []
for _ in range(EPOCHS):
    for ids, x, y in data:
        loss = torch.nn.functional.mse_loss(net(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
        seen.append(ids.tolist())
report = {
    "rank": accelerator.process_index,
    "world_size": accelerator.num_processes,
    "distributed_type": str(accelerator.distributed_type),
    "backend": torch.distributed.get_backend(),
    "root_device": str(accelerator.device),
    "losses": losses,
    "seen": seen,
    **sharding(net),
}
write(OUT, accelerator.process_index, report, full_weights(net))
exit_without_teardown()
