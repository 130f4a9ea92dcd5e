"""`normbench probe`: per-block signal propagation at init, checked on hand-made tensors and on layers whose init
fixes the answer (ReZero and Fixup blocks are the identity; Fixup's zero head sends no gradient into the blocks)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from normbench import cli
from normbench.diagnostics.probe import (
    COLUMNS,
    grid,
    probe,
    probe_model,
    probe_recipe,
    reshape,
    summarize,
    token_cosine,
    write_report,
)
from normbench.errors import NormbenchError
from tests.layers._cases import NUM_CLASSES, images, tiny_vit


def test_token_cosine_of_identical_orthogonal_and_opposite_tokens():
    same = torch.ones(2, 5, 8)
    assert token_cosine(same) == pytest.approx(1.0)
    eye = torch.eye(8)[None, :4]  # 4 orthogonal tokens
    assert token_cosine(eye) == pytest.approx(0.0)
    pair = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]])
    assert token_cosine(pair) == pytest.approx(-1.0)


def _batch():
    return images(batch=8), torch.arange(8) % NUM_CLASSES


@pytest.mark.parametrize("layer", ["rezero", "fixup", "fixup_official", "rezero_per_branch"])
def test_identity_blocks_keep_the_stream(layer):
    frame = probe_model(tiny_vit(layer, depth=4), *_batch())
    assert list(frame.columns) == COLUMNS and list(frame["block"]) == [0, 1, 2, 3]
    assert (frame["growth"] == 1.0).all()
    assert frame["rms_in"].nunique() == 1 and frame["token_cos"].nunique() == 1


def test_fixup_blocks_get_no_gradient_at_init_and_rezero_only_through_alpha():
    # Fixup zeroes the classifier, so the first step's gradient stops at the head
    assert (probe_model(tiny_vit("fixup", depth=3), *_batch())["grad_norm"] == 0).all()
    model = tiny_vit("rezero", depth=3)
    frame = probe_model(model, *_batch())
    assert (frame["grad_norm"] > 0).all()
    # by hand: only α has a gradient (every branch output is multiplied by α = 0)
    x, y = _batch()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    for i, block in enumerate(model.blocks):
        assert all(p.grad is None or not p.grad.any() for n, p in block.named_parameters() if "alpha" not in n)
        assert frame.loc[i, "grad_norm"] == pytest.approx(block.ls1.alpha.grad.abs().item(), rel=1e-5)


def test_layernorm_stream_and_gradients_match_a_direct_computation():
    model = tiny_vit("layernorm", depth=3)
    x, y = _batch()
    frame = probe_model(model, x, y)
    with torch.no_grad():
        h = model.pos_drop(torch.cat([model.cls_token.expand(8, -1, -1), model.patch_embed(x)], 1) + model.pos_embed)
        for i, block in enumerate(model.blocks):
            out = block(h)
            assert frame.loc[i, "rms_in"] == pytest.approx(h.pow(2).mean().sqrt().item(), rel=1e-5)
            assert frame.loc[i, "growth"] == pytest.approx(
                (out.pow(2).mean() / h.pow(2).mean()).sqrt().item(), rel=1e-5)
            assert frame.loc[i, "token_cos"] == pytest.approx(token_cosine(out), rel=1e-5)
            h = out
    torch.nn.functional.cross_entropy(model(x), y).backward()
    want = math.sqrt(sum(p.grad.pow(2).sum().item() for p in model.blocks[1].parameters()))
    assert frame.loc[1, "grad_norm"] == pytest.approx(want, rel=1e-5)
    assert (frame["growth"] != 1.0).all()


def test_probe_over_a_grid_summarizes_and_writes_the_report(tmp_path: Path):
    frame = probe(grid(["layernorm", "rezero"], [1, 2], [16], base=None), batch_size=8)
    assert len(frame) == 2 * (1 + 2)
    assert set(frame[["layer", "depth", "dim"]].itertuples(index=False, name=None)) == {
        ("layernorm", 1, 16), ("rezero", 1, 16), ("layernorm", 2, 16), ("rezero", 2, 16)}
    table = summarize(frame)
    assert len(table) == 4
    rezero = table[table["layer"] == "rezero"]
    assert (rezero["stream_growth"] == 1.0).all() and (rezero["max_block_growth"] == 1.0).all()
    md = write_report(frame, tmp_path, "tiny")
    assert md == tmp_path / "probe-tiny.md"
    assert (tmp_path / "probe-tiny.png").stat().st_size > 0
    assert len(pd.read_csv(tmp_path / "probe-tiny.csv")) == len(frame)
    text = md.read_text(encoding="utf-8")
    assert text.count("| layernorm ") == 2 and text.count("| rezero ") == 2


def test_cli_probe_flags_and_suite(tmp_path: Path, capsys):
    assert cli.main(["probe", "--layers", "fixup", "layerscale", "--depth", "2", "--dim", "16", "--batch-size", "8",
                     "--out", str(tmp_path)]) == 0
    assert (tmp_path / "probe-digits-dim16-depth2.md").exists()
    assert "layerscale" in capsys.readouterr().out
    suite = tmp_path / "s.yaml"
    suite.write_text("name: tinyprobe\ndataset: {name: digits}\nmodel: {embed_dim: 16, num_heads: 2, patch_size: 4}\n"
                     "matrix:\n  depth: [1, 2]\n  layer: [rmsnorm]\n  seed: [0, 1]\n", encoding="utf-8")
    assert cli.main(["probe", str(suite), "--out", str(tmp_path), "--batch-size", "8"]) == 0
    text = (tmp_path / "probe-tinyprobe.md").read_text(encoding="utf-8")
    assert text.count("| rmsnorm ") == 2, "one model per (layer, depth): seeds do not change what is probed"
    assert "recipe: digits (one validation batch of 8 images, native size), patch 4, 2 heads, dim 16" in text
    assert "- machine: " in text and "torch " in text  # a committed report says where it came from


def test_cli_probe_without_out_writes_to_the_git_ignored_runs_folder(tmp_path: Path, monkeypatch, capsys):
    """The README's `normbench probe --depth 6 36` once wrote its report into the repository's results/."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["probe", "--layers", "layernorm", "--depth", "1", "--dim", "16", "--batch-size", "8"]) == 0
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        f"probe-digits-dim16-depth1.{ext}" for ext in ("csv", "md", "png")]
    assert (tmp_path / "runs" / "probe-digits-dim16-depth1.md").is_file()
    probe_help = cli.build_parser()._subparsers._group_actions[0].choices["probe"].format_help()
    assert "(default: runs/, not committed" in " ".join(probe_help.split())  # --help says where


@pytest.mark.parametrize(("flag", "value", "message"), [("--depth", "0", "depths of 1 or more"),
                                                         ("--dim", "30", "multiple of 4, e.g. 28"),
                                                         ("--heads", "5", "split into 5 heads"),
                                                         ("--layers", "layernrom", "layernorm")])
def test_cli_probe_bad_input_exits_2_naming_the_fix(flag, value, message, tmp_path: Path, capsys):
    assert cli.main(["probe", flag, value, "--depth", "1", "--out", str(tmp_path)] if flag != "--depth"
                    else ["probe", flag, value, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir()), "nothing half-written"


def test_reshape_puts_each_row_at_each_width_with_its_heads_once():
    rows = grid(["layernorm", "peri_ln"], [2], [16])
    cells = reshape(rows + rows, dims=[16, 48], heads=[2, 3])  # a repeated row is probed once
    shapes = [(c.model.layer, c.model.depth, c.model.embed_dim, c.model.num_heads) for c in cells]
    assert shapes == [("layernorm", 2, 16, 2), ("peri_ln", 2, 16, 2), ("layernorm", 2, 48, 3), ("peri_ln", 2, 48, 3)]
    assert [c.model.num_heads for c in reshape(rows, dims=[16, 48], heads=[8])] == [8, 8, 8, 8]  # one for all
    assert [c.model.depth for c in reshape(rows, depths=[1, 3])] == [1, 1, 3, 3]  # width and heads kept
    assert {c.model.embed_dim for c in reshape(rows, depths=[1, 3])} == {16}
    assert "dim 16/48 with 2/3 heads (head dim 8/16)" in probe_recipe(cells, 8)
    with pytest.raises(NormbenchError, match="one count per --dim"):
        reshape(rows, dims=[16, 48], heads=[2, 3, 4])
    with pytest.raises(NormbenchError, match="--dim 48 does not split into 5 heads"):
        reshape(rows, dims=[48], heads=[5])


def test_cli_probe_suite_across_widths_writes_one_table_and_the_width_figure(tmp_path: Path, capsys):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: widths\ndataset: {name: digits}\nmodel: {embed_dim: 16, num_heads: 2, patch_size: 4}\n"
                     "matrix:\n  depth: [2]\n  layer: [layernorm, peri_ln]\n  lr: [1.0e-3, 3.0e-3]\n", encoding="utf-8")
    assert cli.main(["probe", str(suite), "--dim", "16", "48", "--heads", "2", "3", "--batch-size", "8",
                     "--out", str(tmp_path)]) == 0
    stem = tmp_path / "probe-widths-dim16-48-heads2-3"
    frame = pd.read_csv(stem.with_suffix(".csv"))
    assert set(frame[["layer", "dim", "heads"]].itertuples(index=False, name=None)) == {
        ("layernorm", 16, 2), ("peri_ln", 16, 2), ("layernorm", 48, 3), ("peri_ln", 48, 3)}
    assert (frame["depth"] == 2).all() and len(frame) == 4 * 2  # the suite's depth, two blocks per model
    text = stem.with_suffix(".md").read_text(encoding="utf-8")
    assert text.count("| peri_ln ") == 2 and "dim 16/48 with 2/3 heads (head dim 8/16)" in text
    assert stem.with_suffix(".png").stat().st_size > 0
    # the width figure reads the same summary as the table: a layer's growth at each width
    table = summarize(frame)
    assert list(table.columns[:4]) == ["layer", "depth", "dim", "heads"] and len(table) == 4
    peri = table[table["layer"] == "peri_ln"].set_index("dim")
    assert (peri["stream_growth"] > table[table["layer"] == "layernorm"].set_index("dim")["stream_growth"]).all()
    assert cli.main(["probe", str(suite), "--dim", "16", "48", "--heads", "2", "3", "4",
                     "--out", str(tmp_path / "x")]) == 2
    assert "one count per --dim (2) or one for all" in capsys.readouterr().err
    assert not (tmp_path / "x").exists(), "nothing written"
