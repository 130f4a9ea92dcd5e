"""LearnableScaler's op, forward + backward: the batch_norm-kernel form normbench uses against the `addcmul` form
and torch's fused LayerNorm, interleaved in one process, best and median over many blocks (CPU timings on shared
machines are noisy: compare the minima).

    OMP_NUM_THREADS=1 python scripts/bench_scaler_op.py [--device cuda] [--shape 64 65 192]
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch import nn

from normbench.diagnostics.bench import fwd_bwd, time_ms
from normbench.errors import NormbenchError
from normbench.layers.norms import LearnableScaler
from normbench.train.device import resolve_device


class AddcmulScaler(LearnableScaler):
    """The previous implementation: b + x * a with torch.addcmul (its autograd runs four kernels)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.b, x, self.a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", type=int, nargs=3, default=[64, 65, 192], metavar=("B", "T", "C"))
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    try:
        dev = resolve_device(args.device)
    except NormbenchError as e:
        parser.error(str(e))
    dim = args.shape[-1]
    x = torch.randn(args.shape, device=dev, requires_grad=True)
    g = torch.randn(args.shape, device=dev)
    modules = {"layernorm": nn.LayerNorm(dim, eps=1e-6), "scaler_addcmul": AddcmulScaler(dim),
               "scaler_batchnorm": LearnableScaler(dim)}
    fns = {name: fwd_bwd(m.to(dev), x, g) for name, m in modules.items()}
    for fn in fns.values():
        time_ms(fn, dev, 6 * args.calls)  # warm-up: allocator, page faults, caches
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.blocks):
        for name, fn in fns.items():
            samples[name].append(time_ms(fn, dev, args.calls))
    best = {name: min(s) for name, s in samples.items()}
    median = {name: statistics.median(s) for name, s in samples.items()}
    for name in fns:
        print(f"{name:17s} best {best[name]:.3f} ms ({best[name] / best['layernorm']:.2f}x LN)   "
              f"median {median[name]:.3f} ms ({median[name] / median['layernorm']:.2f}x LN)")


if __name__ == "__main__":
    main()
