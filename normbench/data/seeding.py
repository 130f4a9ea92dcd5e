"""Per-epoch seeds, so shuffling and augmentation can be replayed from (seed, epoch) alone."""

from __future__ import annotations

import numpy as np

_MASK64 = (1 << 64) - 1


def epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit seed mixed from `seed` and `epoch` (nearby pairs give unrelated streams)."""
    # SeedSequence hashes its entropy; masking lets negative seeds through
    state = np.random.SeedSequence([int(seed) & _MASK64, int(epoch) & _MASK64]).generate_state(1, dtype=np.uint64)
    return int(state[0]) >> 1
