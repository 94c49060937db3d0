"""DFlash: a block drafter reading the target's features, drafting a whole block in one forward.

The published architecture (z-lab's `DFlashDraftModel`, served by vLLM and SGLang), with its names:
- context: the target's hidden states at `target_layer_ids` (output-of-layer ids: HF hidden_states
  id + 1), concatenated, `fc` (no bias) to the draft's width, `hidden_norm`; one row per position the
  target has committed. They are never queries: each layer projects them into its own keys and values
  (k_proj / v_proj, then k_norm), so every layer attends to the target's context directly.
- block: [root, mask, ..., mask] (block_size tokens, the target's embedding; the mask is the
  target's row `mask_token_id`) at positions t..t+block_size-1, attending to the whole context and
  the whole block (not causal: one denoising step); Qwen3 layers (q_norm, k_norm on each head).
- the output at block position j >= 1, through `norm` and the target's lm_head, is the law of the
  token at depth j: block_size - 1 drafts from one forward.
The context keys and values are cached across steps (committed positions only, kept per row); the
block's are dropped after each forward. The folder layout is z-lab's: config.json (Qwen3-style, with
dflash_config {block_size, mask_token_id, target_layer_ids} and num_target_layers) and model.safetensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

from framework.core import files
from framework.lm.models import sizes_stated
from framework.zoo.checkpoints import torch_dtype
from proposers.common.head_files import head_folder, save_head

WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class DFlashConfig:
    hidden_size: int  # the draft's width: the target's (it reads the target's embedding)
    vocab_size: int  # the target's vocabulary
    target_num_layers: int
    target_layer_ids: tuple[int, ...]  # output-of-layer ids (hidden_states id + 1), as published
    block_size: int = 8  # root + block_size - 1 drafted positions
    mask_token_id: int = 0  # the target's embedding row the mask positions read
    num_layers: int = 1
    num_heads: int = 8
    num_kv_heads: int = 4
    head_dim: int | None = None
    intermediate_size: int = 768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_positions: int = 4096

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_layer_ids", tuple(int(i) for i in self.target_layer_ids))
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2 (the root and at least one drafted position), "
                             f"got {self.block_size}")
        if not self.target_layer_ids:
            raise ValueError("DFlash reads at least one target layer: target_layer_ids is empty")
        bad = [i for i in self.target_layer_ids if not 0 <= i < self.target_num_layers]
        if bad:
            raise ValueError(f"target_layer_ids {bad} are not layers of a {self.target_num_layers}-layer target")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} is outside the vocabulary 0..{self.vocab_size - 1}")

    @property
    def hidden_layers(self) -> tuple[int, ...]:
        """The HF hidden_states indices read (an output-of-layer id i is hidden_states[i + 1])."""
        return tuple(i + 1 for i in self.target_layer_ids)

    def layer_config(self) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            head_dim=self.head_dim or self.hidden_size // self.num_heads, rms_norm_eps=self.rms_norm_eps,
            max_position_embeddings=self.max_positions,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta})


def spread_layers(target_num_layers: int, count: int = 3) -> tuple[int, ...]:
    """`count` output-of-layer ids spread evenly from layer 1 to L - 3 (z-lab's published choice:
    1, 13, ..., 49 of 52)."""
    low, high = min(1, target_num_layers - 1), max(min(1, target_num_layers - 1), target_num_layers - 3)
    if count == 1:
        return (target_num_layers // 2,)
    return tuple(sorted({round(low + i * (high - low) / (count - 1)) for i in range(count)}))


class DFlashAttention(nn.Module):
    def __init__(self, config: LlamaConfig, layer_index: int):
        super().__init__()
        self.layer_index, self.head_dim = layer_index, config.head_dim
        H, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(H, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(H, kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(H, kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, H, bias=False)
        self.q_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, x: torch.Tensor, context: torch.Tensor, rope, cache, mask: torch.Tensor) -> torch.Tensor:
        """x [B, M, H] (the block, normed), context [B, A, H] -> [B, M, H]; mask [B, 1, M, S] over every key."""
        B, M, _ = x.shape
        both = torch.cat([context.to(x.dtype), x], dim=1)  # [B, A+M, H]: new context rows, then the block
        q = self.q_norm(self.q_proj(x).view(B, M, -1, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(both).view(B, both.shape[1], -1, self.head_dim)).transpose(1, 2)
        v = self.v_proj(both).view(B, both.shape[1], -1, self.head_dim).transpose(1, 2)
        cos, sin = rope  # [B, A+M, d]
        q, _ = apply_rotary_pos_emb(q, q, cos[:, -M:], sin[:, -M:])
        k, _ = apply_rotary_pos_emb(k, k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_index)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
        return self.o_proj(out.transpose(1, 2).reshape(B, M, -1))


class DFlashLayer(nn.Module):
    def __init__(self, config: LlamaConfig, layer_index: int):
        super().__init__()
        self.self_attn = DFlashAttention(config, layer_index)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, h, context, rope, cache, mask):
        h = h + self.self_attn(self.input_layernorm(h), context, rope, cache, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDrafter(nn.Module):
    def __init__(self, config: DFlashConfig):
        super().__init__()
        self.config = config
        layer = config.layer_config()
        H = config.hidden_size
        self.fc = nn.Linear(len(config.target_layer_ids) * H, H, bias=False)
        self.hidden_norm = LlamaRMSNorm(H, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList([DFlashLayer(layer, i) for i in range(config.num_layers)])
        self.norm = LlamaRMSNorm(H, eps=config.rms_norm_eps)
        self.rotary = LlamaRotaryEmbedding(layer)

    @property
    def drafts(self) -> int:
        return self.config.block_size - 1

    def context(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden states at the drafter's layers [..., L, H] -> context rows [..., H]."""
        return self.hidden_norm(self.fc(hidden.flatten(-2).to(self.fc.weight.dtype)))

    def forward(self, embedded: torch.Tensor, context: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache=None) -> torch.Tensor:
        """embedded [B, M, H] (the block), context [B, A, H] (new context rows), positions [B, A+M],
        mask [B or 1, 1, M, S] bool over the cached, new context and block keys -> [B, M, H] normed."""
        rope = self.rotary(embedded, positions)
        h = embedded
        for layer in self.layers:
            h = layer(h, context, rope, cache, mask)
        return self.norm(h)

    def check_target(self, model) -> None:
        c = self.config
        have = (model.config.hidden_size, model.get_output_embeddings().weight.shape[0], model.config.num_hidden_layers)
        want = (c.hidden_size, c.vocab_size, c.target_num_layers)
        if have != want:
            raise ValueError(f"this DFlash drafter was made for a target of hidden size, vocabulary, layers {want}; "
                             f"this target has {have}")

    # ---- files: z-lab's layout ------------------------------------------------------------------
    def save(self, folder, dtype: torch.dtype = torch.bfloat16, extra: dict | None = None) -> Path:
        c = self.config
        config = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": c.hidden_size,
                  "vocab_size": c.vocab_size, "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads,
                  "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim or c.hidden_size // c.num_heads,
                  "intermediate_size": c.intermediate_size, "rms_norm_eps": c.rms_norm_eps, "hidden_act": "silu",
                  "attention_bias": False, "max_position_embeddings": c.max_positions, "tie_word_embeddings": False,
                  "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta},
                  "num_target_layers": c.target_num_layers, "is_causal": False,
                  "dflash_config": {"block_size": c.block_size, "mask_token_id": c.mask_token_id,
                                    "target_layer_ids": list(c.target_layer_ids)}, **(extra or {})}
        return save_head(self, folder, config, "config.json", WEIGHTS_FILE, dtype)  # the names are z-lab's already

    @classmethod
    def load(cls, path, dtype: torch.dtype | str = torch.float32) -> DFlashDrafter:
        dtype = torch_dtype(dtype) if isinstance(dtype, str) else dtype
        folder = head_folder(path, "config.json")
        if not (folder / "config.json").is_file() or not (folder / WEIGHTS_FILE).is_file():
            raise FileNotFoundError(f"no DFlash drafter at {folder} (expected config.json and {WEIGHTS_FILE}); train "
                                    "one with `python -m experiments.train training=zoo_dflash`")
        return read(folder, files.read_json(folder / "config.json")).to(dtype).eval()


def read(folder: Path, config: dict) -> DFlashDrafter:
    """A DFlash drafter from a z-lab folder; the DFlash2 extensions (convolutions, candidate selector) are named."""
    from safetensors.torch import load_file

    d = config.get("dflash_config") or {}
    for key in ("conv_kernel_size", "selector_rank"):
        if key in d:
            raise ValueError(f"{folder}: a DFlash2 drafter ({key} in dflash_config) is not supported, only DFlash")
    rope = config.get("rope_parameters") or {}
    missing = [k for k in ("block_size", "target_layer_ids") if k not in d]
    if missing or "num_target_layers" not in config:
        raise ValueError(f"{folder}/config.json lacks dflash_config {missing} or num_target_layers: "
                         "not a DFlash drafter")
    drafter = DFlashDrafter(DFlashConfig(
        hidden_size=config["hidden_size"], vocab_size=config["vocab_size"],
        target_num_layers=config["num_target_layers"],
        target_layer_ids=tuple(d["target_layer_ids"]), block_size=d["block_size"],
        mask_token_id=d.get("mask_token_id", 0), num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        num_kv_heads=config.get("num_key_value_heads", config["num_attention_heads"]),
        head_dim=config.get("head_dim"), intermediate_size=config["intermediate_size"],
        rms_norm_eps=config.get("rms_norm_eps", 1e-6),
        rope_theta=rope.get("rope_theta", config.get("rope_theta", 10000.0)),
        max_positions=config.get("max_position_embeddings", 4096)))
    state = load_file(folder / WEIGHTS_FILE)
    expected = set(drafter.state_dict())
    missing, unknown = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unknown:
        raise ValueError(f"{folder / WEIGHTS_FILE} does not fit a DFlash drafter of its config: missing {missing[:6]}, "
                         f"unexpected {unknown[:6]}")
    drafter.load_state_dict(state)
    return drafter


def random_dflash(hidden_size: int, vocab_size: int, target_num_layers: int, target_layer_ids=None, block_size: int = 4,
                  mask_token_id: int | None = None, num_layers: int = 1, num_heads: int = 2, num_kv_heads: int = 1,
                  intermediate_size: int = 32, seed: int = 0, scale: float = 1.0,
                  dtype: str = "float32") -> DFlashDrafter:
    """A random-weight drafter for the tiny targets of tests and configs (weights ~ N(0, scale^2 / fan_in))."""
    sizes_stated(hidden_size=hidden_size, vocab_size=vocab_size, target_num_layers=target_num_layers)
    layers = (tuple(target_layer_ids) if target_layer_ids is not None
              else spread_layers(target_num_layers, min(3, target_num_layers)))
    mask_token_id = vocab_size - 1 if mask_token_id is None else mask_token_id  # token 0 is often a zero padding row
    config = DFlashConfig(hidden_size, vocab_size, target_num_layers, layers, block_size, mask_token_id, num_layers,
                          num_heads, num_kv_heads, intermediate_size=intermediate_size)
    drafter = DFlashDrafter(config)
    generator = torch.Generator().manual_seed(seed)
    for p in drafter.parameters():
        if p.dim() > 1:
            p.data.copy_(torch.randn(p.shape, generator=generator) * scale / p.shape[-1] ** 0.5)
    return drafter.to(getattr(torch, dtype)).eval()

