"""Giving a cell back on a full disk (sweep/cell_end.py `give_back`): the retry gets room no other writer can take
first, the give-back's own reserve (store/reserve.py `free_last`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from normbench.store import reserve
from normbench.store.journal import LedgerWriteError
from normbench.sweep.cell_end import give_back


class _FullDiskClaim:
    """A claim whose ledger write the disk refuses until the give-back's reserve is gone (the first, shared reserve
    already taken by another writer)."""

    number = 7

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ledger = SimpleNamespace(journal=SimpleNamespace(path=str(folder / "ledger.journal")))
        self.tries: list[bool] = []  # whether the give-back's reserve was still there at each try

    def release(self) -> None:
        self.tries.append((self.folder / reserve.LAST).exists())
        if self.tries[-1]:
            raise LedgerWriteError(f"{self.folder / 'ledger.journal'}: cannot write the ledger (No space left)")


def test_a_refused_give_back_frees_its_own_reserve_and_then_lands(tmp_path, capsys):
    reserve.keep(tmp_path)
    reserve.free(tmp_path)  # the first refusal freed the shared one; another writer took that room
    claim = _FullDiskClaim(tmp_path)
    give_back(claim)
    assert claim.tries == [True, False]  # refused with the reserve there, landed once it was freed
    assert "could not give trial" not in capsys.readouterr().err


def test_keep_restores_both_reserves_with_real_bytes(tmp_path):
    reserve.keep(tmp_path)
    assert reserve.free(tmp_path) and reserve.free_last(tmp_path)
    assert not reserve.free_last(tmp_path)  # nothing left to free
    reserve.keep(tmp_path)
    for name in (reserve.RESERVE, reserve.LAST):
        assert (tmp_path / name).stat().st_size == reserve.RESERVE_BYTES
        assert (tmp_path / name).stat().st_blocks * 512 >= reserve.RESERVE_BYTES  # not sparse: freeing it frees room
