"""Tree attention as one registered Hugging Face attention function.

Every query row (the root and the tree nodes, or prompt tokens at prefill) sees the valid
cached past, its ancestors and itself. HFTarget passes that pattern compactly, as a TreeMask in
the forward's keyword arguments (`speculum_mask`), which the model hands through to the
function registered here; no dense mask is built on the kernel path. The backend (`speculum_backend`:
"auto", "triton", "sdpa" or "reference") picks the Triton kernel, PyTorch's fused
scaled_dot_product_attention over the dense boolean mask, or the plain PyTorch reference written
out here (einsum, mask, softmax: the one the others are tested against); "auto" is Triton on
CUDA, SDPA elsewhere (2-3x the einsum reference on CPU). Called without a TreeMask (a plain forward), the
function is ordinary causal attention over the given 4D mask, or a causal one.
The value head may be narrower than the query/key head (DeepSeek's MLA): every backend returns the value's width.
A layer's own settings come as the model passes them: `sliding_window` (keys fewer than that many positions
behind the query, from the positions the TreeMask carries) and `s_aux` (GPT-OSS's per-head attention sinks: one
more logit in each softmax's denominator, with no value). Logit soft-capping (Gemma-2) is refused by name.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface, AttentionMaskInterface

from framework.core.tree_mask import TreeMask
from framework.lm.packing import Packing

ATTENTION_NAME = "speculum_tree"


def tree_attention_reference(
    query: torch.Tensor,  # [B, Hq, M, D]
    key: torch.Tensor,  # [B, Hkv, S, D]
    value: torch.Tensor,  # [B, Hkv, S, Dv] (MLA: Dv != D)
    mask: torch.Tensor,  # [B, 1, M, S] bool (True = may attend) or additive float
    scaling: float,
    sinks: torch.Tensor | None = None,  # [Hq] a sink logit per head (GPT-OSS), or None
) -> torch.Tensor:
    """Masked attention with grouped KV heads, never repeating K/V.  -> [B, Hq, M, Dv]"""
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
    if sinks is not None:  # the sink's column joins the softmax and leaves: it has no value
        sink = sinks.to(work).reshape(1, Hkv, group, 1, 1).expand(B, -1, -1, M, 1)
        weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        weights = torch.softmax(scores, dim=-1)
    out = torch.einsum("bhgms,bhsd->bhgmd", weights, value.to(work))
    return out.reshape(B, Hq, M, value.shape[-1]).to(query.dtype)


def reference_backend(query, key, value, mask: TreeMask, scaling: float, window=None, sinks=None) -> torch.Tensor:
    return tree_attention_reference(query, key, value, mask.dense(window), scaling, sinks)


def sdpa_backend(query, key, value, mask: TreeMask, scaling: float, window=None, sinks=None) -> torch.Tensor:
    """Every query row sees at least itself, so no row of the mask is empty (SDPA would give NaN). SDPA has no
    sinks: a layer with them runs the reference."""
    if sinks is not None:
        return reference_backend(query, key, value, mask, scaling, window, sinks)
    if window is None and (mask.is_causal or mask.sees_all):  # a prefill (SDPA's causal kernel) or a plain step
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal,
                                                                scale=scaling,
                                                                enable_gqa=query.shape[1] != key.shape[1])
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask.additive(query.dtype, window), scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1])


def triton_backend(query, key, value, mask: TreeMask, scaling: float, window=None, sinks=None) -> torch.Tensor:
    from framework.lm.tree_attention_triton import tree_attention_triton  # triton loads only when used

    return tree_attention_triton(query, key, value, mask, scaling, window=window, sinks=sinks)


BACKENDS = {"reference": reference_backend, "sdpa": sdpa_backend, "triton": triton_backend}


def resolve_backend(name: str, device: torch.device) -> str:
    if name == "auto":
        return "triton" if device.type == "cuda" else "sdpa"
    if name not in BACKENDS:
        raise ValueError(f"unknown tree-attention backend {name!r} (have auto, {', '.join(BACKENDS)})")
    return name


def use_tree_attention(model, backend: str | None) -> None:
    """Run `model` on the registered tree attention (backend None: leave the model as it is)."""
    if backend is not None:
        resolve_backend(backend, torch.device("cpu"))  # a bad name fails here, not mid-forward
        model.set_attn_implementation(ATTENTION_NAME)


def hf_tree_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      speculum_mask: TreeMask | None = None, speculum_backend: str = "auto",
                      speculum_packing: Packing | None = None,
                      sliding_window: int | None = None, s_aux: torch.Tensor | None = None, softcap=None, **kwargs):
    """The AttentionInterface signature: returns ([B, M, Hq, D], no weights). A packed forward's queries
    [1, Hq, T, D] are unpacked into their rows for attention and its output packed back ([1, T, Hq, D])."""
    if softcap is not None:
        raise ValueError(f"attention logit soft-capping ({softcap}) is not supported by the tree attention: "
                         "run this target with tree_backend=null (its own attention over dense masks)")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    M, S = query.shape[-2], key.shape[-2]
    if speculum_mask is not None:
        speculum_mask = speculum_mask.to(query.device)  # a layer on another device than the first (device_map)
        if speculum_packing is not None:
            query = speculum_packing.unpack_heads(query)
        out = BACKENDS[resolve_backend(speculum_backend, query.device)](query, key, value, speculum_mask, scale,
                                                                        sliding_window, s_aux)
        if speculum_packing is not None:
            return speculum_packing.pack(out.transpose(1, 2)), None
    else:
        if attention_mask is None:  # a plain causal call (no tree): the last M of S positions
            mask = torch.ones(M, S, dtype=torch.bool, device=query.device).tril(S - M)
            if sliding_window is not None:  # query row i sits at position S - M + i
                mask &= ~torch.ones(M, S, dtype=torch.bool, device=query.device).tril(S - M - sliding_window)
            mask = mask[None, None]
        else:
            mask = attention_mask[..., :S]
        out = tree_attention_reference(query, key, value, mask, scale, s_aux)
    return out.transpose(1, 2).contiguous(), None


def no_dense_mask(*args, **kwargs):
    """Mask builder for our implementation: none; the TreeMask travels in the kwargs."""
    return None


AttentionInterface.register(ATTENTION_NAME, hf_tree_attention)
AttentionMaskInterface.register(ATTENTION_NAME, no_dense_mask)
