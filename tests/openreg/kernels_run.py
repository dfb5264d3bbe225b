"""Models that need kernels torch_openreg lacks, trained by accelctl's Trainer.

``python kernels_run.py MODEL ACCELERATOR OUT``, as a user would run a script.

MODEL: ``cnn`` (Conv2d, ReLU, MaxPool2d, Linear: openreg has no convolution), ``attention``
(scaled-dot-product attention: openreg's kernels are placeholders), ``lstm`` (``nn.LSTM``: off the
CPU it calls a fused cell the CPU lacks too). No normalisation layer: openreg runs those as
torch's decomposed kernels, about 1 ulp from the CPU's, and the tests compare weights exactly.
Each process of the run writes ``OUT/<rank>.json``: the final weights (as lists), its metrics,
and the ``cpu_fallback_calls`` of its metrics log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import accelctl


class Model(nn.Module):
    def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


class CNN(Model):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 4, 3)
        )
        self.head = nn.Linear(4 * 2 * 2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, 2, 8).permute(2, 0, 3, 1, 4)
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(mixed.transpose(1, 2).reshape(batch, length, width))


class TinyTransformer(Model):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 16)
        self.blocks = nn.Sequential(Attention(), Attention())
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(x)).mean(1))


class Recurrent(Model):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1])


MODELS = {
    "cnn": (CNN, (1, 8, 8)),
    "attention": (TinyTransformer, (6, 4)),
    "lstm": (Recurrent, (6, 4)),
}


def main() -> None:
    name, accelerator, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make()
    data = torch.utils.data.TensorDataset(torch.randn(32, *shape), torch.randint(0, 3, (32,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
    trainer = accelctl.Trainer(
        accelerator=accelerator,
        max_epochs=2,
        root_dir=out,
        enable_checkpointing=False,
        log_every_n_steps=1,
        flops_per_sample=None,
    )
    trainer.fit(model, loader)
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    result = {
        "device": str(trainer.device),
        "metrics": trainer.metrics,
        "fallback_calls": [line.get("cpu_fallback_calls") for line in lines],
        "weights": {k: v.cpu().double().flatten().tolist() for k, v in model.state_dict().items()},
    }
    (out / f"{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
