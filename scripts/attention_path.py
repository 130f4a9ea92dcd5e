"""timm's Attention with torch's fused kernel (`fused_attn=True`, F.scaled_dot_product_attention) against the
explicit softmax(q kᵀ) v, forward + backward, interleaved, over sequence lengths: the measurement behind
normbench/train/fastpath.py's choice of attention path per device and token count.

    OMP_NUM_THREADS=1 python scripts/attention_path.py [--device cuda] [--repeats 7]

Writes results/attention-path-<device>-<torch>.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from datetime import datetime, timezone
from pathlib import Path

import torch
from timm.layers import Attention

from normbench.diagnostics.bench import device_slug, time_ms, torch_version
from normbench.train.device import resolve_device

# (tokens, dim, heads, batch): digits at patch 2, and 4; CIFAR at patch 4; 224 px at patch 16; 256 px at patch 16
SHAPES = ((17, 64, 4, 64), (33, 64, 4, 64), (65, 64, 4, 64), (65, 192, 3, 64), (197, 192, 3, 16), (257, 384, 6, 8))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    dev = resolve_device(args.device)
    batch_scale = 4 if dev.type == "cuda" else 1
    rows = ["| tokens | dim | heads | batch | fused ms | explicit ms | explicit / fused |",
            "|--:|--:|--:|--:|--:|--:|--:|"]
    for tokens, dim, heads, batch in SHAPES:
        attn = Attention(dim, num_heads=heads, qkv_bias=True).to(dev)
        x = torch.randn(batch * batch_scale, tokens, dim, device=dev, requires_grad=True)
        g = torch.randn_like(x)
        inputs = [x, *attn.parameters()]

        def run(fused: bool, attn: Attention = attn, x: torch.Tensor = x, g: torch.Tensor = g,
                inputs: list = inputs) -> None:
            attn.fused_attn = fused
            torch.autograd.grad(attn(x), inputs, g)

        samples: dict[bool, list[float]] = {True: [], False: []}
        for fused in samples:
            time_ms(lambda f=fused: run(f), dev, 3 * args.calls)  # warm-up
        for _ in range(args.repeats):
            for fused in samples:
                samples[fused].append(time_ms(lambda f=fused: run(f), dev, args.calls))
        fused_ms, explicit_ms = (statistics.median(samples[k]) for k in (True, False))
        rows.append(f"| {tokens} | {dim} | {heads} | {batch * batch_scale} | {fused_ms:.3f} | {explicit_ms:.3f} | "
                    f"{explicit_ms / fused_ms:.3f} |")
        print(rows[-1], flush=True)
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    header = (f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.platform()}, {os.cpu_count()} CPUs{load}; "
              f"torch {torch.__version__}, threads {torch.get_num_threads()}; device {device_slug(dev)}; medians of "
              f"{args.repeats} interleaved blocks of {args.calls} forward+backward calls")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"attention-path-{device_slug(dev)}-{torch_version()}.md"
    path.write_text("# timm Attention: fused kernel vs explicit\n\n" + header + "\n\n" + "\n".join(rows) + "\n",
                    encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
