#!/usr/bin/env python3
"""Trains a small PyTorch MLP with orthojit.Muon (hybrid Muon + AdamW) and, from the same
initialization, with torch.optim.AdamW, and prints both loss curves.

The task: classify 32-dimensional inputs by the labels of a random teacher network (10 classes).
Muon takes the hidden matrices, AdamW the biases and the first layer, named "embed" here the way
token embeddings are (DeepSpeed's tagging rule keeps it on AdamW).

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train_mlp_torch.py [--steps 300] [--preset deepspeed] [--device cuda]

With --device cuda the model, the data and the optimizer state live on the GPU and orthojit.Muon
steps them there (the same code as on the CPU: no other change to the training loop).

Exits 1 if Muon's final training loss is not below its initial one.
"""

import argparse
import copy
import sys

import torch
from torch import nn

import orthojit


class MLP(nn.Module):
    def __init__(self, inputs=32, hidden=64, classes=10):
        super().__init__()
        self.embed = nn.Linear(inputs, hidden)  # AdamW by name
        self.hidden = nn.Linear(hidden, hidden)  # Muon
        self.out = nn.Linear(hidden, classes)  # Muon (its bias: AdamW)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(torch.relu(self.embed(x)))))


def make_teacher(generator):
    return torch.randn(32, 64, generator=generator) / 32 ** 0.5, torch.randn(64, 10, generator=generator) / 8


def data(teacher, samples, generator):
    x = torch.randn(samples, 32, generator=generator)
    y = (torch.tanh(x @ teacher[0]) @ teacher[1]).argmax(dim=1)
    return x, y


def train(model, optimizer, x, y, steps, batch, generator, scheduler=None):
    losses = []
    for _ in range(steps):
        index = torch.randint(0, x.shape[0], (batch,), generator=generator).to(x.device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[index]), y[index])
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--preset", default="deepspeed", choices=[preset["name"] for preset in orthojit.muon_presets()])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"--device {args.device}: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device(args.device)

    generator = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    teacher = make_teacher(generator)
    x, y = data(teacher, 2048, generator)
    x_test, y_test = data(teacher, 512, generator)  # the same teacher, fresh inputs
    x, y, x_test, y_test = x.to(device), y.to(device), x_test.to(device), y_test.to(device)
    initial = MLP().to(device)
    muon_model, adamw_model = copy.deepcopy(initial), copy.deepcopy(initial)

    muon = orthojit.Muon(muon_model.named_parameters(), preset=args.preset, muon_lr=0.02, adam_lr=3e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(muon, T_max=args.steps)
    for group in muon.param_groups:
        print(f"{group['name']:12s} lr {group['lr']:<8g} {', '.join(group['param_names'])}")
    muon_losses = train(muon_model, muon, x, y, args.steps, args.batch, torch.Generator().manual_seed(1), schedule)

    adamw = torch.optim.AdamW(adamw_model.parameters(), lr=3e-3, weight_decay=0.0)
    adamw_schedule = torch.optim.lr_scheduler.CosineAnnealingLR(adamw, T_max=args.steps)
    adamw_losses = train(adamw_model, adamw, x, y, args.steps, args.batch, torch.Generator().manual_seed(1), adamw_schedule)

    def window(losses, at):
        part = losses[max(0, at - 10):at] or losses[:1]
        return sum(part) / len(part)

    print(f"{'step':>6s} {'orthojit.Muon':>14s} {'AdamW':>10s}")
    marks = sorted({1} | {max(1, args.steps * k // 6) for k in range(1, 7)})
    for step in marks:
        print(f"{step:6d} {window(muon_losses, step):14.4f} {window(adamw_losses, step):10.4f}")

    with torch.no_grad():
        def accuracy(model):
            return (model(x_test).argmax(dim=1) == y_test).float().mean().item() * 100

        print(f"held-out accuracy: orthojit.Muon {accuracy(muon_model):.1f}%, AdamW {accuracy(adamw_model):.1f}%")
    print(f"orthojit.Muon ({args.preset}): {muon.state_bytes()['total']} bytes of optimizer state, "
          f"AdamW: {sum(p.numel() for p in adamw_model.parameters()) * 8}")

    first, last = window(muon_losses, 1), window(muon_losses, args.steps)
    if not last < first:
        print(f"FAIL: orthojit.Muon's loss did not go down ({first:.4f} -> {last:.4f})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
