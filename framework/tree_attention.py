"""Tree attention as one registered Hugging Face attention function.

Every query row (the root and the tree nodes, or prompt tokens at prefill) sees the valid
cached past, its ancestors and itself. HFTarget passes that pattern as a 4D boolean mask
[B, 1, M, S]; the model hands it through unchanged to the function registered here.
This is the PyTorch reference; the Triton kernel (same signature) plugs in beside it.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface

ATTENTION_NAME = "speculum_tree"


def tree_attention_reference(
    query: torch.Tensor,  # [B, Hq, M, D]
    key: torch.Tensor,  # [B, Hkv, S, D]
    value: torch.Tensor,  # [B, Hkv, S, D]
    mask: torch.Tensor,  # [B, 1, M, S] bool (True = may attend) or additive float
    scaling: float,
) -> torch.Tensor:
    """Masked attention with grouped KV heads, never repeating K/V.  -> [B, Hq, M, D]"""
    B, Hq, M, D = query.shape
    Hkv = key.shape[1]
    group = Hq // Hkv
    work = torch.promote_types(query.dtype, torch.float32)  # low precision accumulates in fp32
    q = query.reshape(B, Hkv, group, M, D).to(work)
    scores = torch.einsum("bhgmd,bhsd->bhgms", q, key.to(work)) * scaling
    m = mask[:, :, None]  # [B, 1, 1, M, S]
    if m.dtype == torch.bool:
        scores = scores.masked_fill(~m, float("-inf"))
    else:
        scores = scores + m.to(scores.dtype)
    weights = torch.softmax(scores, dim=-1)
    out = torch.einsum("bhgms,bhsd->bhgmd", weights, value.to(work))
    return out.reshape(B, Hq, M, D).to(query.dtype)


def hf_tree_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The AttentionInterface signature: returns ([B, M, Hq, D], no weights)."""
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    M, S = query.shape[-2], key.shape[-2]
    if attention_mask is None:  # a plain causal call (no tree): the last M of S positions
        mask = torch.ones(M, S, dtype=torch.bool, device=query.device).tril(S - M)[None, None]
    else:
        mask = attention_mask[..., :S]
    out = tree_attention_reference(query, key, value, mask, scale)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION_NAME, hf_tree_attention)
