"""Medusa-1 heads: K extra next-next-token predictors on the target's last hidden state.

Head k (0-based) reads the post-norm hidden state h_t that produced token t+1 and predicts token
t+k+2: the node at depth k+1 of the tree whose root is token t+1. Each head is a residual SiLU
block (zero-initialised, so it starts as the identity) and a linear map to the vocabulary,
initialised from the target's lm_head. Medusa "version 2" heads (TGI's) keep only the blocks and
read through the target's own lm_head (own_lm_heads False). Saved as safetensors plus a config
that records the target's sizes, so heads refuse a target they were not trained for; the
published layouts are read and written by proposers/medusa/published.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from framework.core import files
from framework.lm.models import sizes_stated
from proposers.common import position_tree
from proposers.common.head_files import head_folder, read_head, save_head

CONFIG_FILE, WEIGHTS_FILE, TREE_FILE = "medusa_config.json", "medusa_heads.safetensors", "medusa_tree.json"
WRITERS: dict = {}  # published layouts: format -> writer(heads, folder, dtype), from proposers/medusa/published.py


@dataclass(frozen=True)
class MedusaConfig:
    hidden_size: int
    vocab_size: int | None  # None: heads through the target's lm_head, for any vocabulary
    num_heads: int = 4
    num_blocks: int = 1  # residual blocks per head
    own_lm_heads: bool = True  # False: Medusa "version 2", logits through the target's lm_head

    def __post_init__(self) -> None:
        if self.num_heads < 1 or self.num_blocks < 0:
            raise ValueError(f"need num_heads >= 1 and num_blocks >= 0, got {self.num_heads}, {self.num_blocks}")


class ResidualBlock(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.linear = nn.Linear(size, size)
        nn.init.zeros_(self.linear.weight)  # the identity at the start: the head begins as lm_head
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.silu(self.linear(x))


class MedusaHeads(nn.Module):
    def __init__(self, config: MedusaConfig, searched: dict | None = None):
        """searched: the tree measured for these heads on their target (medusa_tree.json beside them), if any."""
        super().__init__()
        self.config, self.searched = config, searched or {}
        H, V = config.hidden_size, config.vocab_size
        self.blocks = nn.ModuleList(
            nn.Sequential(*(ResidualBlock(H) for _ in range(config.num_blocks))) for _ in range(config.num_heads)
        )
        self.lm_heads = nn.ModuleList(nn.Linear(H, V, bias=False)
                                      for _ in range(config.num_heads if config.own_lm_heads else 0))

    def forward(self, hidden: torch.Tensor, lm_head: nn.Module | None = None) -> torch.Tensor:
        """hidden [..., H] -> logits [..., K, V]; lm_head: the target's, which "version 2" heads read through."""
        if not self.config.own_lm_heads and lm_head is None:
            raise ValueError("these Medusa heads read through the target's lm_head: pass it")
        heads = self.lm_heads if self.config.own_lm_heads else [lm_head] * self.config.num_heads
        return torch.stack([head(block(hidden)) for block, head in zip(self.blocks, heads)], dim=-2)

    @classmethod
    def for_target(cls, model, num_heads: int = 4, num_blocks: int = 1) -> MedusaHeads:
        """Fresh heads sized for `model`, each output layer a copy of its lm_head."""
        lm_head = model.get_output_embeddings().weight  # [V, H]
        heads = cls(MedusaConfig(lm_head.shape[1], lm_head.shape[0], num_heads, num_blocks))
        for head in heads.lm_heads:
            head.weight.data.copy_(lm_head.detach().float())
        return heads

    def check_target(self, hidden_size: int, vocab_size: int) -> None:
        c = self.config
        if (c.hidden_size, c.vocab_size or vocab_size) != (hidden_size, vocab_size):
            raise ValueError(
                f"Medusa heads were trained for a target with hidden size {c.hidden_size} and vocabulary "
                f"{c.vocab_size}, but this target has hidden size {hidden_size} and vocabulary {vocab_size}"
            )

    def save(self, folder: str | Path, dtype: torch.dtype = torch.bfloat16, extra: dict | None = None,
             format: str = "speculum") -> Path:
        """Our layout, or a published one (WRITERS, filled by proposers/medusa/published.py)."""
        if format != "speculum":
            if format not in WRITERS:
                raise ValueError(f"unknown Medusa format {format!r} (have speculum, {', '.join(WRITERS)})")
            return WRITERS[format](self, folder, dtype)
        return save_head(self, folder, {**asdict(self.config), **(extra or {})}, CONFIG_FILE, WEIGHTS_FILE, dtype)

    @classmethod
    def load(cls, folder: str | Path, dtype: torch.dtype = torch.float32) -> MedusaHeads:
        _, fields, state = read_head(folder, CONFIG_FILE, WEIGHTS_FILE, "Medusa heads",
                                     "python -m experiments.train training=zoo_medusa")
        tree = heads_folder(folder) / TREE_FILE
        searched = files.read_json(tree) if tree.is_file() else None
        heads = cls(MedusaConfig(**{k: fields[k] for k in MedusaConfig.__dataclass_fields__ if k in fields}), searched)
        heads.load_state_dict(state)
        return heads.to(dtype).eval()


def heads_folder(path: str | Path) -> Path:
    return head_folder(path, CONFIG_FILE)


def load_choices(path: str | Path) -> list[tuple[int, ...]]:
    """The tree searched for these heads (saved beside them by the training run)."""
    return position_tree.load_choices(heads_folder(path), TREE_FILE,
                                      "python -m experiments.train training=zoo_medusa")


def random_heads(hidden_size: int, vocab_size: int, num_heads: int = 4, num_blocks: int = 1, seed: int = 0,
                 scale: float = 1.0, dtype: str = "float32") -> MedusaHeads:
    """Random-weight heads (every weight ~ N(0, scale^2 / fan_in)), for the tiny random targets of tests and configs."""
    sizes_stated(hidden_size=hidden_size, vocab_size=vocab_size)
    generator = torch.Generator().manual_seed(seed)
    heads = MedusaHeads(MedusaConfig(hidden_size, vocab_size, num_heads, num_blocks))
    for p in heads.parameters():
        fan_in = p.shape[-1] if p.dim() > 1 else hidden_size
        p.data.copy_(torch.randn(p.shape, generator=generator) * scale / fan_in**0.5)
    return heads.to(getattr(torch, dtype)).eval()
