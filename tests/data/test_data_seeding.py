from __future__ import annotations

from normbench.data.seeding import epoch_seed


def test_epoch_seed_is_stable_and_distinct() -> None:
    assert epoch_seed(0, 0) == epoch_seed(0, 0)
    seeds = {epoch_seed(s, e) for s in range(5) for e in range(5)}
    assert len(seeds) == 25
    assert epoch_seed(1, 0) != epoch_seed(0, 1)
    assert 0 <= epoch_seed(-3, 7) < 2**63
