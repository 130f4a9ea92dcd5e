"""`train.optimizer: muon` (train/muon.py): each parameter on the optimizer docs/layers.md's table names, the
Newton-Schulz step and a whole Muon step against the reference's (KellerJordan/Muon muon.py, written out here in
float64), the AdamW part as `optimizer: adamw`'s, every layer and family stepping under it (nGPT's matrices staying on
the sphere), and a suite that trains with it end to end."""

from __future__ import annotations

import copy
import fnmatch
import math
import re

import pytest
import torch
import torch.nn.functional as F
from timm.optim.muon import resolve_ns_coefficients, zeropower_via_newtonschulz

from normbench.cli import main
from normbench.contracts.recipe import TrainConfig
from normbench.train.muon import create_muon
from tests.conftest import REPO
from tests.layers._cases import SINGLE, images, tiny_vit

MISSION = ["layernorm", "rmsnorm", "learnable_scaler", "layerscale", "rezero", "fixup"]
FAMILIES = ["hc", "hc_dynamic", "mhc", "ngpt"]
SUITE_ROWS = ["dyt", "derf", "derf_alpha03", "layernorm+qk_norm", "peri_ln"]  # suites/depth-sweep-digits-muon.yaml


def docs_table() -> tuple[list[tuple[list[str], str]], str]:
    """docs/layers.md's table under "The optimizer: AdamW and Muon": (name patterns, optimizer) per row, and the
    optimizer of the row for every other parameter."""
    text = (REPO / "docs" / "layers.md").read_text()
    section = text.split("## The optimizer: AdamW and Muon", 1)[1].split("\n## ", 1)[0]
    rows, default = [], None
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[1] not in ("Muon", "AdamW"):
            continue
        if cells[0].startswith("every other parameter"):
            default = cells[1]
        else:
            rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
    assert rows and default, "the docs' table is missing or changed its shape"
    return rows, default


def expected_optimizer(name: str, rows: list[tuple[list[str], str]], default: str) -> str:
    return next((opt for patterns, opt in rows if any(fnmatch.fnmatchcase(name, p) for p in patterns)), default)


def optimizer_of(model: torch.nn.Module, optimizer: str = "muon") -> dict[str, str]:
    opt = create_muon(model, TrainConfig(optimizer=optimizer, lr=1e-3))
    by_id = {id(p): "Muon" if g["use_muon"] else "AdamW" for g in opt.param_groups for p in g["params"]}
    return {name: by_id[id(p)] for name, p in model.named_parameters()}


@pytest.mark.parametrize("layer", MISSION + FAMILIES + SUITE_ROWS)
def test_each_parameter_lands_on_the_optimizer_the_docs_table_names(layer):
    rows, default = docs_table()
    got = optimizer_of(tiny_vit(layer))
    wrong = {n: o for n, o in got.items() if o != expected_optimizer(n, rows, default)}
    assert not wrong, wrong
    assert sum(o == "Muon" for o in got.values()) == 4 * 3  # qkv, proj, fc1, fc2 of each of the 3 blocks


def test_every_row_of_the_docs_table_names_parameters_that_exist():
    rows, _ = docs_table()
    names = {n for layer in MISSION + FAMILIES for n, _ in tiny_vit(layer).named_parameters()}
    for patterns, _ in rows:
        for pattern in patterns:
            assert any(fnmatch.fnmatchcase(n, pattern) for n in names), pattern


def test_a_muon_tag_moves_a_parameter_either_way():
    model = tiny_vit("hc")
    model.blocks[0].hc1.static_alpha._muon = True
    model.blocks[0].attn.qkv.weight._muon = False
    got = optimizer_of(model)
    assert got["blocks.0.hc1.static_alpha"] == "Muon" and got["blocks.0.attn.qkv.weight"] == "AdamW"


# ------------------------------------------------------------------------------------- the reference, in float64

def reference_newton_schulz(G: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """KellerJordan/Muon muon.py `zeropower_via_newtonschulz5`, line for line, in float64 instead of bfloat16."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.double()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def muon_group(opt: torch.optim.Optimizer) -> dict:
    return next(g for g in opt.param_groups if g["use_muon"])


@pytest.mark.parametrize("shape", [(24, 40), (40, 24), (32, 32)])
def test_the_newton_schulz_step_is_the_references_on_a_fixed_matrix(shape):
    """The iteration the built optimizer runs (its coefficients, steps and ε), evaluated in float64, equals the
    reference's; in bfloat16, as it runs, it stays within bfloat16's rounding of it."""
    group = muon_group(create_muon(tiny_vit("layernorm"), TrainConfig(optimizer="muon")))
    coefficients = resolve_ns_coefficients(group["ns_coefficients"], {})
    G = torch.randn(*shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    expected = reference_newton_schulz(G)
    ours = zeropower_via_newtonschulz(G, group["ns_steps"], coefficients, eps=group["eps"], dtype=torch.float64)
    # the reference divides by ‖G‖ + 1e-7, timm by max(‖G‖, 1e-7): at ‖G‖ = 30 they stand 4e-9 apart
    assert torch.allclose(ours, expected, rtol=0, atol=1e-8)
    in_bf16 = zeropower_via_newtonschulz(G.float(), group["ns_steps"], coefficients, eps=group["eps"])
    assert in_bf16.dtype == torch.bfloat16
    assert (in_bf16.double() - expected).norm() / expected.norm() < 2e-2


def test_three_muon_steps_are_the_references_and_the_adamw_part_is_adamws():
    """fc1 (a hidden matrix) after three steps on fixed gradients, against the reference's update (Nesterov momentum
    0.95, Newton-Schulz, decoupled decay) at Moonlight's scale 0.2·sqrt(max(A, B)); the head (AdamW) against
    torch.optim.AdamW, as `optimizer: adamw` trains it."""
    lr, wd = 0.02, 0.5
    model = tiny_vit("layernorm")
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():  # entries of order 1, so the decay term is far above bfloat16's rounding
            p.copy_(torch.randn(p.shape, generator=gen))
    fc1, head = model.blocks[0].mlp.fc1.weight, model.head.weight
    w0, h0 = fc1.detach().double().clone(), head.detach().clone()
    opt = create_muon(model, TrainConfig(optimizer="muon", lr=lr, weight_decay=wd))
    adamw_head = head.detach().clone().requires_grad_(True)
    adamw = torch.optim.AdamW([adamw_head], lr=lr, weight_decay=wd)
    grads = [{n: torch.randn(p.shape, generator=gen) for n, p in model.named_parameters()} for _ in range(3)]
    w, momentum = w0.clone(), torch.zeros_like(w0)
    scale = 0.2 * math.sqrt(max(fc1.shape))
    for step in grads:
        for name, p in model.named_parameters():
            p.grad = step[name].clone()
        opt.step()
        g = step["blocks.0.mlp.fc1.weight"].double()
        w = w * (1 - lr * wd)                     # the reference's p.mul_(1 - lr * weight_decay)
        momentum.lerp_(g, 1 - 0.95)               # muon_update: momentum.lerp_(grad, 1 - beta)
        update = g.lerp(momentum, 0.95)           # nesterov: grad.lerp_(momentum, beta)
        w = w - lr * scale * reference_newton_schulz(update)
        assert torch.allclose(opt.state[fc1]["momentum_buffer"].double(), momentum, rtol=0, atol=1e-6)  # β 0.95
        moved, expected = fc1.detach().double() - w0, w - w0
        assert (moved - expected).norm() / expected.norm() < 2e-2  # bfloat16's rounding of the update
        adamw_head.grad = step["head.weight"].clone()
        adamw.step()
        assert torch.allclose(head, adamw_head, rtol=0, atol=1e-6)
    assert not torch.equal(head, h0)


def test_a_fused_qkv_is_stepped_as_three_matrices_q_k_and_v():
    """Two steps of a qkv weight against the reference's update of Wq, Wk and Wv apart (each orthogonalised and scaled
    0.2·sqrt(C) as a C x C matrix: Moonlight's separate projections), not of the (3C x C) weight as one matrix; its
    momentum stays one buffer of the weight's shape, so checkpoints are unchanged."""
    lr, wd = 0.02, 0.1
    model = tiny_vit("layernorm")
    gen = torch.Generator().manual_seed(7)
    qkv = model.blocks[0].attn.qkv.weight
    with torch.no_grad():
        qkv.copy_(torch.randn(qkv.shape, generator=gen))
    w0 = qkv.detach().double().clone()
    opt = create_muon(model, TrainConfig(optimizer="muon", lr=lr, weight_decay=wd))
    split, joint, momentum = w0.clone(), w0.clone(), torch.zeros_like(w0)
    C = qkv.shape[1]
    for _ in range(2):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen)
        p.grad[: C] *= 5  # a large q gradient: the case where one matrix and three differ most
        qkv.grad = qkv.grad.clone()
        opt.step()
        g = qkv.grad.double()
        momentum.lerp_(g, 1 - 0.95)
        update = g.lerp(momentum, 0.95)
        split = split * (1 - lr * wd) - lr * 0.2 * math.sqrt(C) * torch.cat(
            [reference_newton_schulz(block) for block in update.chunk(3)])
        joint = joint * (1 - lr * wd) - lr * 0.2 * math.sqrt(3 * C) * reference_newton_schulz(update)
    moved = qkv.detach().double() - w0
    assert (moved - (split - w0)).norm() / (split - w0).norm() < 2e-2  # bfloat16's rounding
    assert (moved - (joint - w0)).norm() / (joint - w0).norm() > 0.2  # one joint matrix is another update
    assert opt.state[qkv]["momentum_buffer"].shape == qkv.shape
    assert {g.get("muon_blocks") for g in opt.param_groups if g["use_muon"]} == {3, None}  # qkv; proj, fc1, fc2


def test_adamuon_keeps_the_fused_qkv_one_matrix():
    opt = create_muon(tiny_vit("layernorm"), TrainConfig(optimizer="adamuon"))
    assert not any("muon_blocks" in g for g in opt.param_groups)


def test_muon_momentum_is_the_references_unless_the_suite_sets_it():
    model = tiny_vit("layernorm")
    assert muon_group(create_muon(model, TrainConfig(optimizer="muon")))["momentum"] == 0.95
    assert muon_group(create_muon(model, TrainConfig(optimizer="muon", muon_momentum=0.9)))["momentum"] == 0.9
    adamuon = create_muon(model, TrainConfig(optimizer="adamuon"))
    assert {g["algo"] for g in adamuon.param_groups} == {"adamuon"}


def test_the_training_loop_builds_a_muon_cell_with_the_split():
    from normbench.contracts.recipe import CellConfig, ModelConfig
    from normbench.train.loop import build_fit

    for name in ("muon", "Muon", "adamuon"):
        fit = build_fit(CellConfig(model=ModelConfig(depth=2, embed_dim=16, num_heads=2, patch_size=4),
                                   train=TrainConfig(optimizer=name, batch_size=256, muon_momentum=0.9)),
                        "cpu", None, None)
        on_muon = {id(p): g["use_muon"] for g in fit.optimizer.param_groups for p in g["params"]}
        got = {n: on_muon[id(p)] for n, p in fit.model.named_parameters()}
        assert got["blocks.0.mlp.fc1.weight"] and not got["head.weight"] and not got["patch_embed.proj.weight"]
        assert {g["momentum"] for g in fit.optimizer.param_groups if g["use_muon"]} == {0.9}


# -------------------------------------------------------------------------------------- every layer steps under it

def one_step(layer: str, optimizer: str = "muon") -> torch.nn.Module:
    model = tiny_vit(layer)
    opt = create_muon(model, TrainConfig(optimizer=optimizer, lr=1e-2))
    F.cross_entropy(model(images(batch=4)), torch.tensor([0, 1, 2, 3])).backward()
    opt.step()
    for hook in model.plan.after_step:
        hook(model)
    return model


@pytest.mark.parametrize("layer", SINGLE)
def test_every_registered_layer_and_family_steps_under_muon(layer):
    before = tiny_vit(layer)
    after = one_step(layer)
    for name, p in after.named_parameters():
        assert torch.isfinite(p).all(), name
    moved = [n for (n, p), q in zip(after.named_parameters(), before.parameters(), strict=True)
             if n.endswith("mlp.fc1.weight") and not torch.equal(p, q)]
    assert moved, "no hidden matrix moved"


@pytest.mark.parametrize("optimizer", ["muon", "adamuon"])
def test_ngpt_renormalises_its_matrices_after_a_muon_step(optimizer):
    model = one_step("ngpt", optimizer)
    for block in model.blocks:
        for weight, dim in ((block.attn.qkv.weight, 1), (block.attn.proj.weight, 0), (block.mlp.fc1.weight, 1),
                            (block.mlp.fc2.weight, 0)):
            assert torch.allclose(weight.norm(dim=dim), torch.ones(weight.shape[1 - dim]), atol=1e-5)


# ------------------------------------------------------------------------------------------------- end to end

def test_a_suite_with_optimizer_muon_trains_end_to_end_and_mlflow_names_the_optimizer(tmp_path, capsys):
    from mlflow import MlflowClient

    out = tmp_path / "out"
    code = main(["run", str(REPO / "suites" / "smoke.yaml"), "--out", str(out), "--device", "cpu",
                 "--set", "train.optimizer=muon", "--set", "matrix.depth=[2]", "--set", "matrix.layer=[layernorm]",
                 "--set", "matrix.seed=[0]", "--set", "train.epochs=4", "--set", "model.embed_dim=32",
                 "--set", "model.num_heads=2"])
    assert code == 0, capsys.readouterr().err
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = [r for r in client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
            if r.data.tags.get("kind") != "leaderboard"]
    assert len(runs) == 1 and runs[0].data.params["train.optimizer"] == "muon"
    losses = [m.value for m in sorted(client.get_metric_history(runs[0].info.run_id, "train_loss"),
                                      key=lambda m: m.step)]
    assert len(losses) == 4 and losses[-1] < losses[0] - 0.05, losses
    assert "optimizer=muon" in (out / "leaderboard.md").read_text()


def test_the_batched_newton_schulz_step_equals_timms_matrix_by_matrix_step():
    """One Newton-Schulz per shape over every hidden matrix (train/muon.py `_step_batched`, ~3x faster a step at
    depth 36) changes no number: proj, fc1 and fc2 after three steps equal timm's own Muon, which orthogonalises
    them one at a time (the fused qkv, stepped as three blocks, has its own reference test above)."""
    from timm.optim import Muon

    model = tiny_vit("layernorm")
    reference = copy.deepcopy(model)
    config = TrainConfig(optimizer="muon", lr=0.02, weight_decay=0.1)
    ours, theirs = create_muon(model, config), create_muon(reference, config)
    for group in theirs.param_groups:
        group.pop("muon_blocks", None)
    theirs.__class__ = Muon  # timm's step, matrix by matrix
    gen = torch.Generator().manual_seed(11)
    for _ in range(3):
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            p.grad = torch.randn(p.shape, generator=gen)
            q.grad = p.grad.clone()
        ours.step()
        theirs.step()
    compared = 0
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        if "qkv.weight" not in name:
            assert torch.equal(p, q), name
            compared += "mlp.fc" in name or "attn.proj.weight" in name
    assert compared >= 3
