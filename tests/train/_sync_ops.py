"""What a step dispatches that would make a GPU's host wait for it, seen on any device: a TorchDispatchMode that
records the aten ops that read a device value on the host (`item`, `bool()`, data-dependent shapes) or move data
between host and device (a `torch.tensor(...)` of host values, a `.cpu()`, a copy across devices)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ops whose result the host must wait for: a value read back, or an output sized by the data
READS = {"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::equal", "aten::nonzero",
         "aten::masked_select", "aten::unique", "aten::_unique2", "aten::allclose"}
HOST_DATA = {"aten::lift_fresh", "aten::lift_fresh_copy"}  # torch.tensor(host values): a host-to-device copy


class SyncOps(TorchDispatchMode):
    """Inside `with SyncOps() as seen:`, `seen.ops` lists each op that syncs (or would on a GPU). `tolist` and
    `numpy` on a CPU tensor read its memory without dispatching an op: they are recorded by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> SyncOps:
        for name in ("tolist", "numpy"):
            original = self._saved[name] = getattr(torch.Tensor, name)

            def recorded(tensor: torch.Tensor, *args: Any, _name: str = name, _original: Any = original,
                         **kwargs: Any) -> Any:
                self.ops.append(f"Tensor.{_name}")
                return _original(tensor, *args, **kwargs)
            setattr(torch.Tensor, name, recorded)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = func._schema.name
        if name in READS or name in HOST_DATA:
            self.ops.append(name)
        elif name in ("aten::_to_copy", "aten::copy_", "aten::to"):
            self.ops += [f"{name} {d}" for d in _crossings(name, args, kwargs)]
        return func(*args, **kwargs)


def _crossings(name: str, args: tuple, kwargs: dict) -> list[str]:
    """'cpu->cuda' and the like where a copy moves data between devices (or to the host)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if name == "aten::copy_" and len(tensors) >= 2:
        dst, src = tensors[0], tensors[1]
        return [f"{src.device.type}->{dst.device.type}"] if src.device != dst.device else []
    if tensors and "device" in kwargs and kwargs["device"] is not None:
        target = torch.device(kwargs["device"])
        source = tensors[0].device
        if target != source or (target.type == "cpu" and source.type != "cpu"):
            return [f"{source.type}->{target.type}"]
    return []
