"""What the block families cost: train-step time and memory of hc, hc_dynamic, mhc and ngpt against layernorm at
depths 12 and 36 and widths 64 and 192, through `normbench bench` (normbench/diagnostics/bench.py).

Writes into --out (default results/bench-families/):
- bench-<device>-<torch>.csv and .md: every bench column, the machine line (CPU, load, versions) in the .md header;
- families-<device>-<torch>.csv and .md: per (depth, dim) each family's step time and memory beside layernorm's and
  their ratios, with the device, torch and timm versions in every CSV row.

Memory: on CUDA the measured peak; on a CPU, which reports no allocator peak, `train_mem_mib` (parameters, gradients,
AdamW's two moments and the activations autograd saves for backward, counted on an eager forward). A CPU measurement
here is short (a small batch, one step per repeat, the median of a few), to fit a shared machine: its ratios are the
point, its absolute times are the loaded machine's. scripts/gpu-first-contact.sh runs the GPU version.

    python scripts/bench_families.py                       # CPU, batch 16, results/bench-families/
    python scripts/bench_families.py --device cuda --batch-size 256 --repeats 5 --steps 20   # compiled, bf16
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import timm
import torch

from normbench.diagnostics import FAMILY_LAYERS
from normbench.diagnostics.bench import device_slug, run_bench, torch_version
from normbench.report.tables import markdown_table
from normbench.train.device import resolve_device

SUMMARY = ["layer", "depth", "dim", "batch", "params", "step_ms", "step_vs_layernorm", "memory_mib", "memory",
           "mem_vs_layernorm"]


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (depth, dim, layer): step time, memory and both relative to layernorm."""
    cuda = frame["peak_mem_mib"].notna()
    out = frame.assign(memory_mib=frame["peak_mem_mib"].where(cuda, frame["train_mem_mib"]),
                       memory=["peak (CUDA)" if c else "train-step estimate" for c in cuda])
    return out[SUMMARY].sort_values(["depth", "dim"], kind="stable").reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--depth", type=int, nargs="+", default=[12, 36])
    parser.add_argument("--dim", type=int, nargs="+", default=[64, 192])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1, help="train steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats; the median is reported")
    parser.add_argument("--op-iters", type=int, default=20)
    parser.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                        help="torch.compile of the model (auto: on for CUDA)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: steadier on a shared "
                        "machine)")
    parser.add_argument("--out", type=Path, default=Path("results/bench-families"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    dev = resolve_device(args.device)
    run_bench(layers=FAMILY_LAYERS, depths=args.depth, dims=args.dim, batch_size=args.batch_size, device=dev,
              compile_mode=args.compile, out_dir=args.out, warmup=args.warmup, steps=args.steps,
              op_iters=args.op_iters, repeats=args.repeats, interleave=True)
    stem = f"bench-{device_slug(dev)}-{torch_version()}"
    header = (args.out / f"{stem}.md").read_text(encoding="utf-8").splitlines()[2]  # the machine line
    table = summarize(pd.read_csv(args.out / f"{stem}.csv"))
    versions = {"device": device_slug(dev), "torch": torch.__version__, "timm": timm.__version__}
    table.assign(**versions).to_csv(args.out / f"families-{stem.removeprefix('bench-')}.csv", index=False)
    shown = table.round({"step_ms": 1, "step_vs_layernorm": 2, "memory_mib": 1, "mem_vs_layernorm": 2})
    command = "python scripts/bench_families.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        "# What the block families cost, against layernorm", "", header, "",
        f"`{command.strip()}`: batch {args.batch_size}, {args.warmup} warmup step(s), the median of {args.repeats} "
        f"repeats of {args.steps} step(s), the five models of each depth and dim timed in turn (A B C D E A B ...) "
        f"so that the machine's load hits them alike, {args.threads} torch thread(s). `step_vs_layernorm` and "
        "`mem_vs_layernorm` divide by the layernorm row of the same depth and dim. Memory: the CUDA peak, or on a CPU "
        "the train step's estimate (parameters, gradients, AdamW's two moments and the activations saved for "
        "backward). Every column of the run: "
        f"[{stem}.md]({stem}.md).", "",
        markdown_table(shown.astype(object).where(shown.notna(), "")), ""])
    (args.out / f"families-{stem.removeprefix('bench-')}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
