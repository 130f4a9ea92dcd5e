"""The recipe of one cell: model, training and data sections, as a suite's YAML spells them.

Each section is a dataclass; the suite loader rejects any key that is not a field here, so every knob a suite may
set is documented in one place. Defaults are for the bundled digits data on a CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from normbench.data.config import DataConfig


@dataclass
class ModelConfig:
    layer: str = "layernorm"          # registry name or `+` combination (`normbench layers`)
    depth: int = 12                   # transformer blocks
    embed_dim: int = 64               # channels C
    num_heads: int = 4                # attention heads; must divide embed_dim
    patch_size: int = 2               # patch side in pixels
    img_size: int | None = None       # None: the dataset's native size
    mlp_ratio: float = 4.0            # MLP hidden width / C
    qkv_bias: bool = True             # bias on the qkv projection (timm's default)
    init_values: float | None = None  # gate init override (LayerScale ε, ReZero α); None: the paper's rule
    drop_path_rate: float = 0.0       # stochastic depth
    drop_path_mode: str = "linear"    # linear (DeiT) or uniform (CaiT)
    global_pool: str = "token"        # token (class token) or avg
    norm_kwargs: dict[str, Any] = field(default_factory=dict)  # extra norm arguments, e.g. {alpha_init: 1.0} for DyT
    grad_checkpointing: bool = False  # recompute blocks in backward (timm's checkpoint_seq): same result, less memory
    block_kwargs: dict[str, Any] = field(default_factory=dict)  # extra block arguments: {expansion_rate: 2} for hc


ADAM_BETA2_DEFAULT = 0.999  # what `train.adam_beta2: null` trains with: torch's and timm's AdamW default


@dataclass
class TrainConfig:
    epochs: int = 10                   # passes over the training split
    batch_size: int = 128              # images per optimizer step (before accumulation)
    optimizer: str = "adamw"           # adamw or lamb (timm.optim), or any name timm's create_optimizer_v2 knows;
                                       # muon or adamuon: Muon on the hidden matrices, AdamW on the rest (train/muon.py)
    muon_momentum: float | None = None  # Muon's Nesterov momentum on the hidden matrices; None: the reference's 0.95
    adam_beta2: float | None = None    # Adam's second-moment decay (AdamW, LAMB, Muon's AdamW part); None: 0.999
                                       # (ADAM_BETA2_DEFAULT, torch's and timm's)
    lr: float = 1e-3                   # peak learning rate after warmup
    weight_decay: float = 0.05         # decoupled; never applied to norms, gates or embeddings
    warmup_epochs: float = 1.0         # linear warmup from warmup_lr to lr
    warmup_lr: float = 1e-6            # learning rate at step 0
    min_lr: float = 1e-6               # cosine floor
    label_smoothing: float = 0.1       # cross-entropy smoothing
    clip_grad: float | None = 1.0      # max global grad norm; None: no clipping (the norm is still recorded)
    grad_accum_steps: int = 1          # micro-batches per optimizer step
    mixup: float = 0.0                 # mixup alpha (timm.data.Mixup); 0 disables
    cutmix: float = 0.0                # cutmix alpha; 0 disables
    amp: str = "auto"                  # auto (bf16 on CUDA), bf16, or none
    compile: str = "auto"              # auto (on for CUDA), on, off
    max_loss: float | None = None      # a train loss above this is divergence; None: 10 x ln(num_classes)
    log_interval: int = 50             # steps between the loop's only host syncs (divergence check)
    telemetry_every: int = 25          # steps between per-block telemetry samples (train/telemetry.py); 0: off
    seed: int = 0                      # model init, data order and augmentation
    attn_extra_loss: float = 0.0       # LearnableScaler recipe's attention loss coefficient (source 0.03); 0: off
    attn_extra_loss_layers: int = 6    # the first blocks it applies to (source 6)
    train_feature_decay: float = 0.0   # LearnableScaler recipe's |residual| > 200 penalty (source 0.1); 0: off
    # how a cell is kept, not what it trains (RUN_KEYS): out of the recipe hash, the logged params and the report
    checkpoint_minutes: float = 15.0   # wall-clock minutes between checkpoints at epoch boundaries; 0: none at all
    keep_weights: str = "none"         # none, or final: the finished cell's weights as safetensors (docs/faults.md)

    def uses_bf16(self, on_cuda: bool) -> bool:
        """`amp` resolved: "auto" is bf16 on CUDA only (train/loop.py and `normbench bench SUITE` alike)."""
        return self.amp == "bf16" or (self.amp == "auto" and on_cuda)

    def uses_compile(self, on_cuda: bool) -> bool:
        """`compile` resolved: "auto" compiles on CUDA only."""
        return self.compile == "on" or (self.compile == "auto" and on_cuda)


# TrainConfig keys that change how a cell survives and what it leaves behind, never its result: a suite that sets
# them keeps its recipe hash (and its ledger), and the report and MLflow params leave them out
RUN_KEYS = frozenset({"checkpoint_minutes", "keep_weights"})
KEEP_WEIGHTS = ("none", "final")
# the optimizers that train the blocks' hidden matrices with Muon and every other parameter with AdamW, at one lr
# (train/muon.py; docs/layers.md, "The optimizer: AdamW and Muon")
MUON_OPTIMIZERS = ("muon", "adamuon")


@dataclass
class CellConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)

    def flat(self) -> dict[str, Any]:
        """`section.key -> value`, every recipe value (RUN_KEYS are not), for logging and for the results table."""
        out: dict[str, Any] = {}
        for section in ("model", "train", "data"):
            for key, value in asdict(getattr(self, section)).items():
                if not (section == "train" and key in RUN_KEYS):
                    out[f"{section}.{key}"] = value
        return out


@dataclass(frozen=True)
class Cell:
    """One point of a suite's matrix: its axis values, full recipe and stable id (contracts/suite.py makes them)."""

    axes: dict[str, Any]
    config: CellConfig
    cell_id: str
