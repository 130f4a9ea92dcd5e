"""Per-block telemetry: each quantity against an independent computation on a tiny model, no host sync before
`collect`, hooks gone after each observed step, training unchanged, and the metrics in MLflow with sorted names."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.model.vit import NormbenchViT
from normbench.train.loop import train_cell
from normbench.train.telemetry import QUANTITIES, BlockTelemetry, thin

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(layer: str = "layerscale", depth: int = 2, **kw) -> NormbenchViT:
    torch.manual_seed(0)
    return NormbenchViT(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=32, depth=depth,
                        num_heads=4, layer=layer, **kw)


def observe_step(model: nn.Module, step: int = 0, lr: float = 0.1, batches: int = 1) -> BlockTelemetry:
    """One observed SGD step on random images; returns the recorder with the step collected."""
    telemetry = BlockTelemetry(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(1)
    for _ in range(batches):
        x, y = torch.randn(8, 1, 8, 8, generator=gen), torch.randint(0, 10, (8,), generator=gen)
        with telemetry.observe():
            nn.functional.cross_entropy(model(x), y).backward()
    telemetry.before_update()
    optimizer.step()
    telemetry.after_update(step)
    telemetry.collect()
    return telemetry


def values(telemetry: BlockTelemetry, block: int, step: int | None = None) -> dict[str, float]:
    rows = [r for r in telemetry.records() if r["block"] == block and (step is None or r["step"] == step)]
    assert len(rows) == 1, rows
    return rows[0]


def streams_and_branches(model: NormbenchViT, x: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """The stream entering each pre-norm block and its two gated branch outputs, by running the equation by hand."""
    s = model.patch_embed(x)
    s = torch.cat([model.cls_token.expand(s.shape[0], -1, -1), s], dim=1) + model.pos_embed
    out = []
    for b in model.blocks:
        attn = b.ls1(b.attn(b.norm1(s)))
        mid = s + attn
        mlp = b.ls2(b.mlp(b.norm2(mid)))
        out.append({"stream": s, "attn": attn, "mlp": mlp})
        s = mid + mlp
    return out


def test_stream_and_branch_rms_match_the_equation_run_by_hand():
    model = tiny("layerscale", init_values=0.5)
    x = torch.randn(8, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = streams_and_branches(model, x)
    telemetry = BlockTelemetry(model)
    with torch.no_grad(), telemetry.observe():
        model(x)
    telemetry.before_update()
    telemetry.after_update(0)
    for i, e in enumerate(expected):
        got = values(telemetry, i)
        stream_rms = e["stream"].pow(2).mean().sqrt().item()
        assert got["stream_rms"] == pytest.approx(stream_rms, rel=1e-3)
        assert got["stream_max"] == pytest.approx(e["stream"].abs().max().item(), rel=1e-3)
        assert got["attn_rms"] == pytest.approx(e["attn"].pow(2).mean().sqrt().item(), rel=1e-3)
        assert got["mlp_rms"] == pytest.approx(e["mlp"].pow(2).mean().sqrt().item(), rel=1e-3)
        assert got["attn_ratio"] == pytest.approx(got["attn_rms"] / stream_rms, rel=2e-3)
        assert math.isnan(float("nan") if got["grad_norm"] is None else got["grad_norm"])  # no backward: no grads


def test_uniform_attention_has_entropy_ln_n():
    model = tiny("layernorm")
    with torch.no_grad():
        for b in model.blocks:  # q = k = 0: every logit equal, every row uniform over the N = 16 + 1 tokens
            b.attn.qkv.weight.zero_()
            b.attn.qkv.bias.zero_()
    telemetry = observe_step(model)
    for i in range(2):
        assert values(telemetry, i)["attn_entropy"] == pytest.approx(math.log(17), rel=1e-4)


def test_attention_entropy_matches_timms_own_probabilities():
    model = tiny("layernorm")
    probs: list[torch.Tensor] = []
    for b in model.blocks:  # timm's non-fused path hands its softmax to attn_drop: catch it there
        b.attn.fused_attn = False
        b.attn.attn_drop.register_forward_hook(lambda m, a, out: probs.append(out.detach()))
    telemetry = observe_step(model)
    assert len(probs) == 2, "timm's non-fused attention did not run: nothing to compare with"  # one per block
    for i, p in enumerate(probs):
        expected = -(p * p.clamp_min(1e-30).log()).sum(-1).mean().item()
        assert values(telemetry, i)["attn_entropy"] == pytest.approx(expected, rel=1e-4)
        assert 0 < expected < math.log(17)


def direct_max_logits(model: NormbenchViT, batches: list[torch.Tensor]) -> list[float]:
    """Each block's largest q·k/√d_h over the batches, from its attention's input, by hand (after QK-norm)."""
    inputs: dict[int, list[torch.Tensor]] = {}
    handles = [b.attn.register_forward_pre_hook(lambda m, a, i=i: inputs.setdefault(i, []).append(a[0].detach()))
               for i, b in enumerate(model.blocks)]
    with torch.no_grad():
        for x in batches:
            model(x)
    for h in handles:
        h.remove()
    out = []
    for i, b in enumerate(model.blocks):
        best = -math.inf
        for h in inputs[i]:
            B, N, C = h.shape
            q, k, _ = b.attn.qkv(h).reshape(B, N, 3, 4, C // 4).permute(2, 0, 3, 1, 4)
            q, k = b.attn.q_norm(q), b.attn.k_norm(k)
            best = max(best, ((q @ k.transpose(-2, -1)) / math.sqrt(C // 4)).max().item())
        out.append(best)
    return out


@pytest.mark.parametrize("layer", ["layerscale", "layerscale+qk_norm", "rmsnorm+qk_norm"])
def test_max_attention_logit_matches_a_direct_computation(layer):
    model = tiny(layer)
    with torch.no_grad():  # non-trivial q/k norms: a telemetry that skipped them would show
        for b in model.blocks:
            for p in (*b.attn.q_norm.parameters(), *b.attn.k_norm.parameters()):
                p.copy_(1 + torch.rand_like(p))
    assert all(b.attn.fused_attn for b in model.blocks), "timm's SDPA path: the logits are never materialized"
    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(2):  # observe_step's micro-batches
        batches.append(torch.randn(8, 1, 8, 8, generator=gen))
        torch.randint(0, 10, (8,), generator=gen)
    expected = direct_max_logits(model, batches)
    telemetry = observe_step(model, batches=2)
    for i, want in enumerate(expected):
        assert values(telemetry, i)["attn_logit_max"] == pytest.approx(want, rel=1e-3)


def test_qk_norm_bounds_the_max_logit_that_grows_without_it():
    got = {}
    for layer in ("layerscale", "layerscale+qk_norm"):
        model = tiny(layer)
        with torch.no_grad():
            for b in model.blocks:
                b.attn.qkv.weight.mul_(30.0)
        got[layer] = values(observe_step(model), 0)["attn_logit_max"]
    assert got["layerscale"] > 10 * math.sqrt(8)
    assert got["layerscale+qk_norm"] <= math.sqrt(8) * 1.001  # |LN(q)·LN(k)|/√d_h <= √d_h with γ = 1, β = 0


@pytest.mark.parametrize("layer", ["rezero", "skipinit"])
def test_blocks_that_start_as_the_identity_have_branch_ratio_zero(layer):
    telemetry = observe_step(tiny(layer))
    for i in range(2):
        got = values(telemetry, i)
        assert got["attn_ratio"] == 0.0 and got["mlp_ratio"] == 0.0 and got["stream_rms"] > 0


def test_grad_norm_is_before_clipping_and_update_ratio_is_sgds_step():
    model, lr = tiny("layerscale", init_values=0.5), 0.1
    reference = tiny("layerscale", init_values=0.5)  # same seed: same weights; its gradients by hand
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 1, 8, 8, generator=gen), torch.randint(0, 10, (8,), generator=gen)
    nn.functional.cross_entropy(reference(x), y).backward()
    telemetry = observe_step(model, lr=lr)
    for i, b in enumerate(reference.blocks):
        grad = math.sqrt(sum(p.grad.pow(2).sum().item() for p in b.parameters()))
        weights = [p for p in b.parameters() if p.ndim >= 2]
        update = lr * math.sqrt(sum(p.grad.pow(2).sum().item() for p in weights))
        weight = math.sqrt(sum(p.pow(2).sum().item() for p in weights))
        got = values(telemetry, i)
        assert got["grad_norm"] == pytest.approx(grad, rel=1e-3)
        assert got["update_ratio"] == pytest.approx(update / weight, rel=1e-3)


def test_micro_batches_are_averaged_and_the_max_is_the_max():
    two = observe_step(tiny(), batches=2)
    model, gen = tiny(), torch.Generator().manual_seed(1)  # the two micro-batches observe_step draws, by hand
    streams = []
    for _ in range(2):
        x, _ = torch.randn(8, 1, 8, 8, generator=gen), torch.randint(0, 10, (8,), generator=gen)
        with torch.no_grad():
            streams.append(streams_and_branches(model, x)[0]["stream"])  # entering block 0, before any update
    rms = [s.pow(2).mean().sqrt().item() for s in streams]
    assert rms[0] != pytest.approx(rms[1], rel=1e-2)  # two different batches: an average differs from either
    assert values(two, 0)["stream_rms"] == pytest.approx((rms[0] + rms[1]) / 2, rel=1e-3)
    assert values(two, 0)["stream_max"] == pytest.approx(max(s.abs().max().item() for s in streams), rel=1e-3)


def test_a_gate_shared_by_both_branches_is_counted_once_per_branch():
    model, shared = tiny("layerscale", init_values=0.5), tiny("layerscale", init_values=0.5)
    for b in shared.blocks:
        b.ls2 = b.ls1  # one module in both slots (ReZero's official shared α); same values as ls2 here
    a, b = observe_step(model), observe_step(shared)
    assert values(a, 0)["attn_rms"] == values(b, 0)["attn_rms"]
    assert values(a, 0)["mlp_rms"] == values(b, 0)["mlp_rms"]


def test_hooks_exist_only_inside_observe_even_on_error():
    model = tiny()

    def hooks() -> int:
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())

    telemetry = BlockTelemetry(model)
    with telemetry.observe():
        assert hooks() == 2 * (1 + 2 + 1) and telemetry.attached  # per block: stream, two gates, qkv
    assert hooks() == 0 and not telemetry.attached
    with pytest.raises(RuntimeError), telemetry.observe():
        raise RuntimeError("boom")
    assert hooks() == 0


def test_no_host_sync_until_collect(monkeypatch):
    model = tiny()
    telemetry = BlockTelemetry(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))

    def sync(*args, **kwargs):
        raise AssertionError("host sync inside an observed step")

    with monkeypatch.context() as m:
        for name in ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__"):
            m.setattr(torch.Tensor, name, sync)
        for step in (0, 5):
            with telemetry.observe():
                nn.functional.cross_entropy(model(x), y).backward()
            telemetry.before_update()
            optimizer.step()
            optimizer.zero_grad()
            telemetry.after_update(step)
    assert [s for s, _ in telemetry._queued] == [0, 5]
    assert all(isinstance(t, torch.Tensor) and t.shape == (2, len(QUANTITIES)) for _, t in telemetry._queued)
    assert telemetry._samples == []
    telemetry.collect()
    assert telemetry._queued == [] and [s for s, _ in telemetry._samples] == [0, 5]


def test_thin_keeps_evenly_spaced_samples_with_the_first_and_last():
    assert thin(list(range(5)), 16) == list(range(5))
    assert thin(list(range(100)), 4) == [0, 33, 66, 99]
    assert thin(list(range(100)), 1) == [99] and thin(list(range(3)), 0) == []


def test_hooks_under_torch_compile_add_no_recompiles():
    """train.py runs observed steps on the eager module; hooks added and removed around them must leave the compiled
    module's graph alone (dynamo's skip_nnmodule_hook_guards) and must not fire inside it."""
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(gm)
        return gm.forward

    torch._dynamo.reset()
    model = tiny(depth=1)
    compiled = torch.compile(model, backend=backend)
    telemetry, x = BlockTelemetry(model), torch.randn(4, 1, 8, 8)
    compiled(x)
    graphs = len(compiles)
    with telemetry.observe():
        model(x)
    compiled(x)
    assert len(compiles) == graphs
    assert telemetry._calls[0] == {"stream_rms": 1, "stream_max": 1, "attn_rms": 1, "mlp_rms": 1, "attn_entropy": 1,
                                   "attn_logit_max": 1}
    torch._dynamo.reset()


def cell(every: int, depth: int = 2, **train) -> CellConfig:
    return CellConfig(model=ModelConfig(layer="layerscale", depth=depth, embed_dim=16, num_heads=2, patch_size=4),
                      train=TrainConfig(**{"epochs": 2, "batch_size": 128, "warmup_epochs": 0, "telemetry_every": every,
                                           **train}))


def test_a_cell_records_every_nth_step_without_changing_its_training():
    on, off = train_cell(cell(3), device="cpu"), train_cell(cell(0), device="cpu")
    assert off.telemetry == []
    assert [h["train_loss"] for h in on.history] == [h["train_loss"] for h in off.history]  # observes only
    steps = sorted({r["step"] for r in on.telemetry})
    assert steps == list(range(0, 2 * (on.train_size // 128), 3))  # 2 epochs of full 128-image batches
    assert {r["block"] for r in on.telemetry} == {0, 1}
    assert all(set(r) == {"step", "block", *QUANTITIES} for r in on.telemetry)
    assert all(v is None or math.isfinite(v) for r in on.telemetry for v in r.values())


def test_with_grad_accumulation_the_steps_are_optimizer_steps():
    result = train_cell(cell(2, grad_accum_steps=2, epochs=1), device="cpu")
    optimizer_steps = result.train_size // 128 // 2
    assert optimizer_steps >= 3
    assert sorted({r["step"] for r in result.telemetry}) == list(range(0, optimizer_steps, 2))


def test_mlflow_gets_the_first_middle_and_last_blocks_under_one_prefix(write_suite, tmp_path):
    from mlflow.tracking import MlflowClient

    from normbench.cli import main

    path = write_suite(train={"epochs": 1, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 2},
                       matrix={"depth": [11], "layer": ["layerscale"], "lr": [1.0e-3], "seed": [0]})
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id], "tags.cell_id != ''")
    names = [k for k in run.data.metrics if k.startswith("telemetry/")]
    logged = [q for q in QUANTITIES if q != "mix_ds_error"]  # layerscale has no mixing matrix: None, not logged
    assert sorted(names) == sorted(f"telemetry/{p}/{q}" for p in ("first", "middle", "last") for q in logged)
    assert not [k for k in run.data.metrics if k.startswith("block")]  # nothing left under the old names
    history = client.get_metric_history(run.info.run_id, "telemetry/last/attn_entropy")  # block 10
    steps = int(run.data.params["data.train_size"]) // 256  # one epoch of full batches
    assert [m.step for m in history] == list(range(0, steps, 2)) and len(history) >= 2
