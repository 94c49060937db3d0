"""vLLM's `speculators` layout (speculators 0.9, what vLLM serves): read EAGLE-3 and EAGLE-1, write EAGLE-3.

Facts: docs/design.md section 12 (from the speculators 0.9.0 wheel and vLLM's loader).
- config.json: speculators_model_type ("eagle3" / "eagle"), speculators_config (algorithm,
  proposal_methods, verifier), transformer_layer_config (the draft's own Llama config: its RoPE,
  which may be the verifier's llama3-scaled one), draft_vocab_size, target_hidden_size,
  eagle_aux_hidden_state_layer_ids in vLLM's convention (hidden_states index = id), and flags
  we refuse by name when set (norm_before_residual, norm_before_fc, fc_norm, norm_output).
- EAGLE-3 weights: our EAGLE-3 names with layers.0.* for midlayer.*; embed_tokens optional (a
  copy of the target's: checked, never used); lm_head, d2t, t2d as SpecForge's.
- EAGLE-1 (speculators <= 0.4): fusion_fc.* for fc.*, transformer.* for layers.0.*; no embedding
  or lm_head (the verifier's); layernorms=True (HASS-style extra norms) is refused.
We write EAGLE-3 with the target's embedding copy when given, since the speculators package fills
a missing embedding only by reading the verifier from its name.
"""

from __future__ import annotations

from pathlib import Path

import torch

from proposers.common.head_files import read_weights, renamed, stored_tensors, weight_files
from proposers.eagle.head import WRITERS, Eagle3Head, EagleConfig, EagleHead, build_head, embedding_fingerprint
from proposers.eagle.published import (
    draft_config,
    layer_ids,
    llama_sizes,
    output_layer_ids,
    refuse_unsupported,
    with_identity_maps,
    write_folder,
)

VERSION = "0.9.0"  # the speculators release whose layout we write
FLAGS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")


def layer_sizes(config: dict, where: Path) -> dict:
    """EagleConfig fields from transformer_layer_config (its RoPE included)."""
    layer = dict(config.get("transformer_layer_config") or {})
    if layer.get("model_type", "llama") != "llama":
        raise ValueError(f"{where}: a {layer['model_type']} draft layer is not supported (Llama layers only)")
    refuse_unsupported({k: v for k, v in layer.items() if k != "rope_scaling"}, where)
    sizes = llama_sizes(layer)
    rope = layer.get("rope_parameters") or ({**layer["rope_scaling"], "rope_theta": sizes["rope_theta"]}
                                             if layer.get("rope_scaling") else None)
    if rope and rope.get("rope_type", rope.get("type", "default")) != "default":
        sizes["rope_parameters"] = rope
    elif rope:
        sizes["rope_theta"] = rope.get("rope_theta", sizes["rope_theta"])
    return sizes


def read(folder: Path, config: dict, convention: str = "speculators") -> EagleHead:
    kind = config.get("speculators_model_type")
    for flag in FLAGS:
        if config.get(flag):
            raise ValueError(f"{folder}: speculators' {flag} is not supported ({flag}=true)")
    if kind in ("eagle3", "peagle"):
        return read_eagle3(folder, config, convention)
    if kind == "eagle":
        return read_eagle1(folder, config)
    raise ValueError(f"{folder}: speculators_model_type {kind!r} is not an EAGLE head we read (eagle3, peagle, eagle)")


def read_eagle3(folder: Path, config: dict, convention: str) -> EagleHead:
    sizes = layer_sizes(config, folder)
    state = renamed(read_weights(weight_files(folder)), "layers.0.", "midlayer.")
    V, draft_vocab = sizes["vocab_size"], config.get("draft_vocab_size") or sizes["vocab_size"]
    if "lm_head.weight" not in state:
        raise ValueError(f"{folder}: no lm_head.weight "
                         "(speculators then slices the verifier's by t2d, which we do not)")
    if draft_vocab == V:
        state = with_identity_maps(state, V)
    target_hidden = config.get("target_hidden_size")
    own_embedding = target_hidden not in (None, sizes["hidden_size"])
    copy = None if own_embedding else state.pop("embed_tokens.weight", None)
    parallel = config.get("speculators_model_type") == "peagle"  # P-EAGLE: mask positions (mask_token_id, mask_hidden)
    econfig = EagleConfig("eagle3", target_layers=layer_ids(config.get("eagle_aux_hidden_state_layer_ids"), convention),
                          draft_vocab_size=draft_vocab if draft_vocab != V else None,
                          target_hidden_size=target_hidden if own_embedding else None,
                          pard_token=config.get("mask_token_id", 0) if parallel else None, **sizes)
    head = build_head(econfig, state, where=folder)
    if copy is not None:
        head.stored_embedding = embedding_fingerprint(copy)
    return head


def read_eagle1(folder: Path, config: dict) -> EagleHead:
    if config.get("layernorms"):
        raise ValueError(f"{folder}: speculators' EAGLE with layernorms=true (HASS-style norms) is not supported")
    state = renamed(renamed(read_weights(weight_files(folder)), "fusion_fc.", "fc."), "transformer.", "layers.0.")
    sizes = layer_sizes(config, folder)  # its layer config carries the verifier's RoPE, which it used
    return build_head(EagleConfig("eagle", fc_bias="fc.bias" in state, **sizes), state, where=folder)


def write(head: EagleHead, folder, dtype: torch.dtype = torch.bfloat16, embedding: torch.Tensor | None = None,
          verifier: str | None = None, speculative_tokens: int = 5) -> Path:
    """An EAGLE-3 head (a P-EAGLE one: speculators' `peagle`) in speculators' layout. embedding: the target's
    (written as embed_tokens, which the package needs when it cannot read the verifier by name); verifier: the
    target's name or path."""
    if not isinstance(head, Eagle3Head):
        raise ValueError("we write speculators' layout for EAGLE-3 heads (its EAGLE-1 format left speculators in 0.5)")
    c = head.config
    layer = {k: v for k, v in draft_config(head).items() if k not in ("qkv_bias", "rope_theta")}
    layer.update(attention_bias=c.attention_bias, mlp_bias=False,
                 rope_parameters=dict(c.rope_parameters or {"rope_type": "default", "rope_theta": c.rope_theta}))
    ids = output_layer_ids(head)  # SGLang's ids (output of layer id); vLLM's are one more
    ids = None if ids is None else [i + 1 for i in ids]
    kind = "eagle3" if c.pard_token is None else "peagle"
    config = {
        "architectures": ["Eagle3Speculator" if kind == "eagle3" else "PEagleSpeculator"],
        "speculators_model_type": kind, "speculators_version": VERSION,
        "speculators_config": {
            "algorithm": kind, "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]}},
        "transformer_layer_config": layer, "draft_vocab_size": c.draft_vocab_size or c.vocab_size,
        "target_hidden_size": c.target_hidden_size, "eagle_aux_hidden_state_layer_ids": ids,
        "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
        **({"mask_token_id": c.pard_token} if kind == "peagle" else {}),
    }
    state = renamed(stored_tensors(head, dtype), "midlayer.", "layers.0.")
    if c.draft_vocab_size is None:
        state.pop("d2t"), state.pop("t2d")
    if embedding is not None and head.embed_tokens is None:
        state["embed_tokens.weight"] = embedding.detach().to(dtype).contiguous().cpu()
    return write_folder(folder, config, state)


WRITERS.update(speculators=write)
