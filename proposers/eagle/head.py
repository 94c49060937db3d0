"""The EAGLE draft head: one decoder layer that runs autoregressively at the feature level.

Head position t reads token x[t+1] (through the target's own embedding) and a feature g_t, and
outputs a feature o_t, whose logits through the target's own `lm_head` predict token x[t+2]. The
embedding and lm_head are the target's modules, handed in at each call: shared and frozen, never
copied into the head. g_t is
- where the target has run: the target's hidden states at t, fused. EAGLE-1 reads one layer (the
  last, post-norm: what lm_head reads), EAGLE-3 low, middle and high layers through one linear map;
- at a drafted node: the head's own output at the node's parent (the feature it predicted).
Input x = fc([embedding ; g]); o = norm(layer(x)). The layer, its rotary embedding and its norm
are transformers' own Llama classes built from a LlamaConfig; attention runs through the
registered tree attention, so the draft tree is read with the same mask and backends as the target.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from framework.lm.models import sizes_stated
from framework.lm.tree_attention import ATTENTION_NAME
from proposers.common.head_files import read_head, save_head

CONFIG_FILE, WEIGHTS_FILE, TREE_FILE = "eagle_config.json", "eagle_head.safetensors", "eagle_tree.json"


@dataclass(frozen=True)
class EagleConfig:
    hidden_size: int  # the target's
    vocab_size: int  # the target's
    target_num_layers: int  # the target's decoder layers (its hidden_states has one more entry)
    target_layers: tuple[int, ...] = (-1,)  # hidden_states indices fused into g (EAGLE-1: the last)
    num_heads: int = 8
    num_kv_heads: int = 4
    intermediate_size: int = 768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_positions: int = 4096

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_layers", tuple(int(i) for i in self.target_layers))
        if not self.target_layers:
            raise ValueError("the head must read at least one target layer")
        bad = [i for i in self.target_layers if not -(self.target_num_layers + 1) <= i <= self.target_num_layers]
        if bad:
            raise ValueError(f"target layers {bad} are outside the target's hidden states 0..{self.target_num_layers}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")

    def layer_config(self) -> LlamaConfig:
        config = LlamaConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=1, num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
            rms_norm_eps=self.rms_norm_eps, max_position_embeddings=self.max_positions, rope_theta=self.rope_theta)
        config._attn_implementation = ATTENTION_NAME  # tree masks, both backends; dense masks when training
        return config


class EagleHead(nn.Module):
    def __init__(self, config: EagleConfig, searched: dict | None = None):
        """searched: what the training run measured and searched for this head (static choices,
        the dynamic tree's budget), from eagle_tree.json; proposers read it for `auto`."""
        super().__init__()
        self.config, self.searched = config, searched or {}
        H, L = config.hidden_size, len(config.target_layers)
        layer_config = config.layer_config()
        self.fuse = nn.Linear(L * H, H, bias=False) if L > 1 else nn.Identity()
        self.fc = nn.Linear(2 * H, H)
        self.layer = LlamaDecoderLayer(layer_config, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(layer_config)
        self.norm = LlamaRMSNorm(H, eps=config.rms_norm_eps)

    def fused(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden states [..., L, H] at target_layers -> g [..., H]."""
        return self.fuse(hidden.flatten(-2))

    def forward(self, embedded: torch.Tensor, feature: torch.Tensor, positions: torch.Tensor, cache=None,
                **attention) -> torch.Tensor:
        """embedded, feature [B, M, H] (token embeddings, g), positions [B, M] -> o [B, M, H].
        attention: the mask keywords (speculum_mask/speculum_backend, or attention_mask [B, 1, M, S])."""
        x = self.fc(torch.cat([embedded, feature.to(embedded.dtype)], dim=-1))
        x = self.layer(x, position_embeddings=self.rotary(x, positions), position_ids=positions, cache=cache,
                       use_cache=cache is not None, **attention)
        return self.norm(x)

    @classmethod
    def for_target(cls, model, target_layers=(-1,), **sizes) -> EagleHead:
        """A fresh head sized for `model` (a Hugging Face causal LM)."""
        c = model.config
        return cls(EagleConfig(c.hidden_size, model.get_output_embeddings().weight.shape[0], c.num_hidden_layers,
                               tuple(target_layers), **sizes))

    @torch.no_grad()
    def warm_start(self, source: EagleHead) -> EagleHead:
        """Start from a trained head of the same sizes: its fc, layer and norm; the fuse map passes
        the source's feature layer through (identity on its block), so this head begins as the source."""
        if (source.config.hidden_size, source.config.vocab_size) != (self.config.hidden_size, self.config.vocab_size):
            raise ValueError("warm start needs a source head of the same hidden size and vocabulary")
        if len(source.config.target_layers) != 1 or source.config.target_layers[0] not in self.config.target_layers:
            raise ValueError(f"the source reads layers {source.config.target_layers}; this head reads "
                             f"{self.config.target_layers}: one of them must be the source's one layer")
        for name in ("fc", "layer", "norm"):
            getattr(self, name).load_state_dict(getattr(source, name).state_dict())
        if isinstance(self.fuse, nn.Linear):
            H, block = self.config.hidden_size, self.config.target_layers.index(source.config.target_layers[0])
            self.fuse.weight.zero_()
            self.fuse.weight[:, block * H : (block + 1) * H] = torch.eye(H)
        return self

    def check_target(self, model) -> None:
        """Refuse a target this head was not trained for, naming what differs."""
        c = self.config
        have = {"hidden size": model.config.hidden_size, "vocabulary": model.get_output_embeddings().weight.shape[0],
                "layer count": model.config.num_hidden_layers}
        want = {"hidden size": c.hidden_size, "vocabulary": c.vocab_size, "layer count": c.target_num_layers}
        differ = [f"{k} {want[k]} (this target: {have[k]})" for k in want if want[k] != have[k]]
        if differ:
            raise ValueError("this EAGLE head was trained for a target with " + ", ".join(differ))

    def save(self, folder, dtype: torch.dtype = torch.bfloat16, extra: dict | None = None):
        return save_head(self, folder, {**asdict(self.config), **(extra or {})}, CONFIG_FILE, WEIGHTS_FILE, dtype)

    @classmethod
    def load(cls, path, dtype: torch.dtype = torch.float32) -> EagleHead:
        folder, fields, state = read_head(path, CONFIG_FILE, WEIGHTS_FILE, "EAGLE head",
                                          "python -m experiments.train experiment=zoo_eagle (or zoo_eagle3)")
        searched = json.loads((folder / TREE_FILE).read_text()) if (folder / TREE_FILE).exists() else None
        head = cls(EagleConfig(**{k: fields[k] for k in EagleConfig.__dataclass_fields__ if k in fields}), searched)
        head.load_state_dict(state)
        return head.to(dtype).eval()


def load_head(path, dtype: str = "float32") -> EagleHead:
    """For Hydra: a trained head from a folder (or the embedded zoo's), in the target's dtype."""
    return EagleHead.load(path, getattr(torch, dtype))


def random_head(hidden_size: int, vocab_size: int, target_num_layers: int, target_layers=(-1,), num_heads: int = 2,
                num_kv_heads: int = 1, intermediate_size: int = 32, seed: int = 0, scale: float = 1.0,
                dtype: str = "float32", searched: dict | None = None) -> EagleHead:
    """A random-weight head for the tiny random targets of tests and configs (weights ~ N(0, scale^2 / fan_in))."""
    sizes_stated(hidden_size=hidden_size, vocab_size=vocab_size, target_num_layers=target_num_layers)
    generator = torch.Generator().manual_seed(seed)
    head = EagleHead(EagleConfig(hidden_size, vocab_size, target_num_layers, tuple(target_layers), num_heads,
                                 num_kv_heads, intermediate_size), searched)
    for name, p in head.named_parameters():
        if p.dim() > 1:
            p.data.copy_(torch.randn(p.shape, generator=generator) * scale / p.shape[-1] ** 0.5)
    return head.to(getattr(torch, dtype)).eval()

