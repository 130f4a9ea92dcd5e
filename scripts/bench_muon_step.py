"""Time one Muon step at a suite's shape: normbench's batched Newton-Schulz (train/muon.py) against timm's Muon, which
orthogonalises the hidden matrices one at a time, on the same model's gradients, stepped in turn.

    OMP_NUM_THREADS=1 python scripts/bench_muon_step.py --depth 36 --dim 64 --repeats 9

Prints the median step of each and the largest difference between the two models' non-qkv weights afterwards (timm
steps the fused qkv as one matrix, normbench as q, k and v: docs/layers.md)."""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import timm
import torch

import normbench  # noqa: F401  (registers the template)
from normbench.contracts.recipe import TrainConfig
from normbench.train.muon import create_muon


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=36)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layer", default="layernorm")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    from timm.optim import Muon

    torch.manual_seed(0)
    model = timm.create_model("normbench_vit", layer=args.layer, depth=args.depth, embed_dim=args.dim,
                              num_heads=args.heads, patch_size=2, img_size=8, num_classes=10)
    reference = copy.deepcopy(model)
    config = TrainConfig(optimizer="muon", lr=3e-3, weight_decay=0.05)
    ours, theirs = create_muon(model, config), create_muon(reference, config)
    for group in theirs.param_groups:
        group.pop("muon_blocks", None)
    theirs.__class__ = Muon
    gen = torch.Generator().manual_seed(1)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        p.grad = torch.randn(p.shape, generator=gen) * 1e-2
        q.grad = p.grad.clone()
    times: dict[str, list[float]] = {"batched (normbench)": [], "matrix by matrix (timm)": []}
    for _ in range(args.repeats):  # interleaved, so the machine's load hits both alike
        for name, opt in (("batched (normbench)", ours), ("matrix by matrix (timm)", theirs)):
            start = time.perf_counter()
            opt.step()
            times[name].append(time.perf_counter() - start)
    matrices = sum(1 for g in ours.param_groups if g.get("use_muon") for _ in g["params"])
    print(f"depth {args.depth}, width {args.dim}, {args.layer}: {matrices} hidden weights on Muon, "
          f"{torch.get_num_threads()} thread(s), median of {args.repeats} steps")
    for name, values in times.items():
        print(f"  {name}: {statistics.median(values) * 1e3:.1f} ms")
    diff = max((p - q).abs().max().item() for (n, p), q in zip(model.named_parameters(), reference.parameters(),
                                                                 strict=True) if "qkv.weight" not in n)
    print(f"  largest difference, every weight but qkv: {diff:g}")


if __name__ == "__main__":
    main()
