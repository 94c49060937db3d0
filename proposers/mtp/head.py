"""MTP: the multi-token-prediction modules a model family ships with its weights (DeepSeek-V3/R1, GLM-4.5+,
Qwen3-Next / Qwen3.5, MiMo; the speculators package's MTP format).

Module k turns a feature h and a token x into the next feature and a law:
    h' = final_norm(block(input_proj([token_norm(embedding(x)) ; hidden_norm(h)])))
    logits = lm_head(h')   (the target's head; a module of its own where the checkpoint has one)
`block` is one decoder layer of the target's own class (its attention: MLA, grouped, gated; its MLP: dense or
routed experts), built from the target's config, so nothing of the target's architecture is copied here. At the
first depth h is the target's last hidden state after its final norm (what transformers' `use_mtp` and vLLM
hand over); deeper, the previous depth's h' (transformers chains the post-norm state, as here).

Depth j drafts with module min(j, n) - 1: a checkpoint with fewer modules than the depth asked reuses its last.
Engines differ here: vLLM reuses modules cyclically (step % n), transformers drafts exactly n tokens.
A module keeps its own KV, as an EAGLE head does (proposers/eagle/proposer.py drives both). With several modules,
the committed positions go through the chain (module k reads module k-1's output), and a drafted level runs every
module on the same inputs so that their caches keep one slot layout; the published checkpoints have one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from inspect import signature

import torch
import transformers
from torch import nn

from framework.lm.models import ARCHITECTURES, sizes_stated
from framework.lm.tree_attention import ATTENTION_NAME


@dataclass(frozen=True)
class MtpConfig:
    num_modules: int
    hidden_size: int
    vocab_size: int
    target_num_layers: int
    model_type: str  # the target's (the block is its decoder layer)
    own_head: bool = False  # each module has its own lm_head (else the target's)
    target_layers: tuple[int, ...] = (-1,)  # the target's last hidden state, after its final norm

    def __post_init__(self) -> None:
        if self.num_modules < 1:
            raise ValueError(f"an MTP head needs at least one module, got {self.num_modules}")

    def layers_for(self, target_num_layers: int) -> tuple[int, ...]:
        return self.target_layers


def target_parts(target_config) -> tuple[type, type, type]:
    """The target architecture's decoder-layer, norm and rotary classes, read off a skeleton on the meta device
    (no weights are made)."""
    skeleton_config = copy.deepcopy(target_config)
    skeleton_config.num_hidden_layers = 1
    if getattr(skeleton_config, "layer_types", None) is not None:
        skeleton_config.layer_types = ["full_attention"]
    with torch.device("meta"):
        skeleton = transformers.AutoModelForCausalLM.from_config(skeleton_config)
    stack = skeleton.model
    return type(stack.layers[0]), type(stack.norm), type(stack.rotary_emb)


def block_config(target_config, num_modules: int):
    """The target's config with the MTP layers appended as full-attention layers (their index N + k picks the
    MLP kind a layer of that index has: routed experts past DeepSeek's first dense layers)."""
    config = copy.deepcopy(target_config)
    N = target_config.num_hidden_layers
    config.num_hidden_layers = N + num_modules
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:N] + ["full_attention"] * num_modules
    config._attn_implementation = ATTENTION_NAME  # a TreeMask while drafting, a causal call without one
    return config


class MtpModule(nn.Module):
    """One MTP module. config: the block config (the target's, with the MTP layers appended); placed: the layer
    index it is built as (N + k); index: k, its layer in the head's own KV cache."""

    def __init__(self, config, placed: int, index: int, layer_class: type, norm_class: type, own_head: bool):
        super().__init__()
        H, eps = config.hidden_size, config.rms_norm_eps
        self.token_norm, self.hidden_norm = norm_class(H, eps=eps), norm_class(H, eps=eps)
        self.input_proj = nn.Linear(2 * H, H, bias=False)
        self.block = layer_class(config, placed)
        self.block.self_attn.layer_idx = index  # the block's KV: layer k of the head's own cache, not N + k
        self.final_norm = norm_class(H, eps=eps)
        self.head = nn.Linear(H, config.vocab_size, bias=False) if own_head else None

    def forward(self, embedded: torch.Tensor, feature: torch.Tensor, position_embeddings, cache=None,
                **attention) -> torch.Tensor:
        """embedded, feature [B, M, H] -> h' [B, M, H]. attention: speculum_mask/speculum_backend (drafting) or
        attention_mask [B, 1, M, S] bool (training); neither: causal."""
        x = self.input_proj(torch.cat([self.token_norm(embedded), self.hidden_norm(feature.to(embedded.dtype))], -1))
        out = self.block(x, position_embeddings=position_embeddings, cache=cache, use_cache=cache is not None,
                         **attention)
        return self.final_norm(out[0] if isinstance(out, tuple) else out)


class MtpHead(nn.Module):
    """The modules of one checkpoint, with the interface the feature-level drafter reads (EagleProposer)."""

    def __init__(self, config: MtpConfig, target_config, searched: dict | None = None):
        super().__init__()
        width, layers = target_config.hidden_size, target_config.num_hidden_layers
        if (width, layers) != (config.hidden_size, config.target_num_layers):
            raise ValueError(f"an MTP head of width {config.hidden_size} after {config.target_num_layers} layers does "
                             f"not fit the target config given (width {width}, {layers} layers)")
        self.config, self.searched = config, searched or {}
        self.target_config = target_config
        layer_class, norm_class, rotary_class = target_parts(target_config)
        blocks = block_config(target_config, config.num_modules)
        self.layers = nn.ModuleList(MtpModule(blocks, layers + k, k, layer_class, norm_class, config.own_head)
                                    for k in range(config.num_modules))
        self.rotary = rotary_class(config=blocks)
        # stacks with per-type RoPE (Gemma-3) take the layer type: the MTP block is a full-attention layer
        typed = "layer_type" in signature(self.rotary.forward).parameters
        self.rope_type = {"layer_type": "full_attention"} if typed else {}

    def check_target(self, model) -> None:
        """Refuse a target this head was not made for, naming what differs."""
        c = self.config
        want = {"model type": c.model_type, "hidden size": c.hidden_size, "vocabulary": c.vocab_size,
                "layer count": c.target_num_layers}
        have = {"model type": model.config.model_type, "hidden size": model.config.hidden_size,
                "vocabulary": model.get_output_embeddings().weight.shape[0],
                "layer count": model.config.num_hidden_layers}
        differ = [f"{k} {want[k]} (this target: {have[k]})" for k in want if want[k] != have[k]]
        if differ:
            raise ValueError("this MTP head was made for a target with " + ", ".join(differ))

    def embedding(self, target_embedding: nn.Module) -> nn.Module:
        return target_embedding  # the modules read the target's (DeepSeek-V3's stored copy is not read)

    def fused(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's last hidden state [..., 1, H] -> h [..., H]."""
        return hidden[..., 0, :]

    def module_for(self, step: int) -> int:
        """The module that drafts from a level `step` deep (0: the committed positions): the last past the count."""
        return min(step, self.config.num_modules - 1)

    def forward(self, embedded: torch.Tensor, feature: torch.Tensor, positions: torch.Tensor, cache=None, step: int = 0,
                **attention) -> torch.Tensor:
        """embedded, feature [B, M, H], positions [B, M] -> h' [B, M, H] of the module for `step`. Every module runs
        (their caches keep one slot layout); at step 0, module k reads module k-1's output."""
        position_embeddings = self.rotary(embedded, positions, **self.rope_type)
        outs = []
        for k, module in enumerate(self.layers):
            given = outs[-1] if step == 0 and k else feature
            outs.append(module(embedded, given, position_embeddings, cache, **attention))
        return outs[self.module_for(step)]

    def logits(self, h: torch.Tensor, lm_head: nn.Module, step: int = 0) -> torch.Tensor:
        """h [..., H] -> logits [..., V] through the module's own head, else the target's."""
        own = self.layers[self.module_for(step)].head
        return lm_head(h) if own is None else own(h)

    def draft_logits(self, h: torch.Tensor, lm_head: nn.Module, step: int = 0) -> torch.Tensor:
        return self.logits(h, lm_head, step)  # the modules draft over the target's whole vocabulary

    def draft_ids(self) -> None:
        return None


def tiny_mtp(arch: str = "llama", vocab_size: int | None = None, hidden_size: int | None = None,
             num_layers: int | None = None, num_heads: int = 4, num_kv_heads: int = 2, max_positions: int = 256,
             num_modules: int = 1, seed: int = 1, scale: float = 1.0, dtype: str = "float32") -> MtpHead:
    """Random modules for a tiny_random_model target of these sizes (models=tiny, the exact check's toy target)."""
    sizes_stated(vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers)
    config = ARCHITECTURES[arch](vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, max_positions, None)
    return random_mtp(config, num_modules, seed, scale, dtype=dtype)


def random_mtp(target_config, num_modules: int = 1, seed: int = 0, scale: float = 1.0, own_head: bool = False,
               dtype: str = "float32") -> MtpHead:
    """Random-weight modules for a target of `target_config` (tests and models=tiny): matrices ~ N(0, scale^2 /
    fan_in), norms at one."""
    config = MtpConfig(num_modules, target_config.hidden_size, target_config.vocab_size,
                       target_config.num_hidden_layers, target_config.model_type, own_head)
    head = MtpHead(config, target_config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=generator) * scale / p.shape[-1] ** 0.5)
    return head.to(getattr(torch, dtype)).eval()
