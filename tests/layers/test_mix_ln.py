"""Mix-LN: post-LN in the first ⌊αL⌋ blocks (α = 0.25, the official scripts' 3 of 12), pre-LN in the rest."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normbench.layers import LayerNorm, post_ln_blocks
from tests.layers._cases import tiny_vit


def _is_post_ln(block: nn.Module) -> bool:
    pre = isinstance(block.norm1, nn.Identity) and isinstance(block.norm2, nn.Identity)
    post = isinstance(block.post_norm1, LayerNorm) and isinstance(block.post_norm2, LayerNorm)
    assert pre == post, "a block is either post-LN or pre-LN"
    return post


@pytest.mark.parametrize(("depth", "post"), [(8, 2), (12, 3), (36, 9), (3, 0)])
def test_the_first_quarter_of_blocks_are_post_ln(depth, post):
    model = tiny_vit("mix_ln", depth=depth, embed_dim=16)
    assert [_is_post_ln(b) for b in model.blocks] == [True] * post + [False] * (depth - post)
    assert isinstance(model.norm, LayerNorm), "the last blocks are pre-LN: the final norm stays"


def test_the_ratio_is_a_block_kwarg():
    model = tiny_vit("mix_ln", depth=8, block_kwargs={"post_ln_ratio": 0.5})
    assert [_is_post_ln(b) for b in model.blocks] == [True] * 4 + [False] * 4
    assert post_ln_blocks(24) == 6
    with pytest.raises(ValueError, match="post_ln_ratio"):
        post_ln_blocks(8, 1.5)


@torch.no_grad()
def test_post_and_pre_blocks_follow_their_equations():
    model = tiny_vit("mix_ln", depth=4).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    post, pre = model.blocks[0], model.blocks[1]
    x = torch.randn(2, 17, 32)
    mid = post.post_norm1(x + post.attn(x))
    torch.testing.assert_close(post(x), post.post_norm2(mid + post.mlp(mid)))
    mid = x + pre.attn(pre.norm1(x))
    torch.testing.assert_close(pre(x), mid + pre.mlp(pre.norm2(mid)))


@pytest.mark.parametrize("kwargs", [{"post_ln_ratio": 1.5}, {"post_ln_ratio": -0.1}, {"post_ln_ratio": "a quarter"},
                                    {"post_ln_ration": 0.5}])
def test_a_suites_bad_ratio_is_one_line_and_exit_2_before_anything_trains(kwargs, write_suite, tmp_path, capsys):
    from normbench.cli import main

    model = {"embed_dim": 16, "num_heads": 2, "patch_size": 4, "block_kwargs": kwargs}
    path = write_suite(model=model, matrix={"depth": [4], "layer": ["mix_ln"], "lr": [1.0e-3], "seed": [0]})
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.block_kwargs" in err and next(iter(kwargs)) in err, err
    assert not (tmp_path / "out").exists()  # refused before the folder is made
