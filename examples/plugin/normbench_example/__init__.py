"""An example normbench plugin: importing it registers `scalenorm` (a norm) and `tanh_gate` (a gate).

One file per layer, each the whole contract: a `torch.nn.Module` with the slot's constructor signature, its values
filled in `reset_parameters()`, and `@normbench.register_layer(name, kind=..., formula=..., source=...)`.
"""

from normbench_example import scalenorm, tanh_gate  # noqa: F401  (register on import)
