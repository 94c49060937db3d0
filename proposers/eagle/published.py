"""The published EAGLE layouts: SafeAILab's EAGLE-1/2, SafeAILab's and SpecForge's EAGLE-3 (read and write).

Facts: docs/design.md section 12 (from SafeAILab/EAGLE, SpecForge, vLLM and SGLang's loaders).
- EAGLE-1/2: config.json (a LlamaConfig dict; `bias` = fc bias, default on; `qkv_bias`) and
  pytorch_model.bin or model.safetensors: fc.*, layers.0.* (no input_layernorm), and a frozen
  copy of the target's embed_tokens, which we check against the target, never use.
- EAGLE-3: config.json with draft_vocab_size (no rope_theta: the draft's RoPE base is 10000)
  and weights midlayer.*, fc.weight [H, 3H], norm.weight, lm_head.weight [Vd, H], d2t, t2d; no
  embedding unless target_hidden_size says the target is of another width.
- Layer ids (`eagle_config.eagle_aux_hidden_state_layer_ids`): SGLang and SpecForge write the
  layer whose *output* is read (hidden_states index id + 1); vLLM and speculators the layer
  *before* which it is read (hidden_states index id). Absent: hidden_states 2, L//2, L-3.
Options we do not implement are refused by name, never ignored.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from framework.core import files
from proposers.common.head_files import read_weights, renamed, stored_tensors, weight_files
from proposers.eagle.head import WRITERS, Eagle3Head, EagleConfig, EagleHead, build_head, embedding_fingerprint

# hidden_states index = id + offset, by the stack that wrote the ids
LAYER_ID_OFFSET = {"sglang": 1, "specforge": 1, "vllm": 0, "speculators": 0}
REFUSED = {  # config options of published drafts that we do not implement: refused, by name
    "fc_norm": "SpecForge's fc_norm (a norm after fc)",
    "norm_before_residual": "norm_before_residual (the residual taken after hidden_norm)",
    "norm_output": "SpecForge's norm_output",
    "rope_scaling": "rope_scaling in the draft",
}


def refuse_unsupported(config: dict, where: Path) -> None:
    for key, what in REFUSED.items():
        if config.get(key):
            raise ValueError(f"{where}: {what} is not supported ({key}={config[key]!r})")
    if config.get("num_hidden_layers", 1) != 1:
        raise ValueError(f"{where}: {config['num_hidden_layers']} draft layers (num_hidden_layers) are not supported: "
                         "published EAGLE drafts have one")


def llama_sizes(config: dict) -> dict:
    """EagleConfig fields from a published draft's LlamaConfig dict."""
    heads = config["num_attention_heads"]
    return {"hidden_size": config["hidden_size"], "vocab_size": config["vocab_size"], "num_heads": heads,
            "num_kv_heads": config.get("num_key_value_heads") or heads, "head_dim": config.get("head_dim"),
            "intermediate_size": config["intermediate_size"], "rms_norm_eps": config.get("rms_norm_eps", 1e-6),
            "rope_theta": config.get("rope_theta", 10000.0),
            "max_positions": config.get("max_position_embeddings", 4096),
            "attention_bias": bool(config.get("qkv_bias", config.get("attention_bias", False)))}


def layer_ids(ids, convention: str) -> tuple[int, ...] | None:
    if ids is None:
        return None
    if convention not in LAYER_ID_OFFSET:
        raise ValueError(f"unknown layer-id convention {convention!r} (have {', '.join(LAYER_ID_OFFSET)})")
    return tuple(int(i) + LAYER_ID_OFFSET[convention] for i in ids)


def read_eagle1(folder: Path, config: dict) -> EagleHead:
    """SafeAILab's EAGLE-1/2 draft (EAGLE-2 changed only the tree)."""
    refuse_unsupported(config, folder)
    state = read_weights(weight_files(folder))
    has_bias = "fc.bias" in state
    stated = config.get("bias", True)  # SafeAILab's loader: bias = con["bias"], default True
    if has_bias != stated:
        warnings.warn(f"{folder}: config says fc bias {stated} but the weights {'have' if has_bias else 'lack'} "
                      "fc.bias; the weights decide", stacklevel=2)
    head = build_head(EagleConfig("eagle", fc_bias=has_bias, **llama_sizes(config)),
                      {k: v for k, v in state.items() if k != "embed_tokens.weight"}, where=folder)
    if "embed_tokens.weight" in state:
        head.stored_embedding = embedding_fingerprint(state["embed_tokens.weight"])
    return head


def read_eagle3(folder: Path, config: dict, convention: str = "sglang") -> EagleHead:
    """SafeAILab's and SpecForge's EAGLE-3 draft (midlayer.*); ids in SGLang's convention unless told."""
    refuse_unsupported(config, folder)
    state = renamed(read_weights(weight_files(folder)), "layers.0.", "midlayer.")  # some converters' names
    sizes = llama_sizes(config)
    draft_vocab = config.get("draft_vocab_size") or sizes["vocab_size"]
    target_hidden = config.get("target_hidden_size")
    if target_hidden not in (None, sizes["hidden_size"]) and "embed_tokens.weight" not in state:
        raise ValueError(f"{folder}: target_hidden_size {target_hidden} differs from the draft's "
                         f"{sizes['hidden_size']} but the file has no embed_tokens of its own")
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    econfig = EagleConfig("eagle3", target_layers=layer_ids(ids, convention),
                          draft_vocab_size=draft_vocab if draft_vocab != sizes["vocab_size"] else None,
                          target_hidden_size=target_hidden if target_hidden != sizes["hidden_size"] else None, **sizes)
    if draft_vocab == sizes["vocab_size"]:
        state = with_identity_maps(state, draft_vocab)
    own_embedding = econfig.target_hidden_size is not None
    ignored = () if own_embedding else ("embed_tokens.weight",)
    return build_head(econfig, {k: v for k, v in state.items() if k not in ignored}, where=folder)


def with_identity_maps(state: dict, vocab_size: int) -> dict:
    """A draft over the whole vocabulary: EAGLE deletes d2t/t2d then (an identity map may be left); ours holds
    identity maps."""
    return {**{k: v for k, v in state.items() if k not in ("d2t", "t2d")},
            "d2t": torch.zeros(vocab_size, dtype=torch.long), "t2d": torch.ones(vocab_size, dtype=torch.bool)}


def draft_config(head: EagleHead) -> dict:
    """The LlamaConfig dict the published drafts carry."""
    c = head.config
    return {"model_type": "llama", "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
            "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads,
            "head_dim": c.head_dim or c.hidden_size // c.num_heads, "num_hidden_layers": 1,
            "rms_norm_eps": c.rms_norm_eps, "vocab_size": c.vocab_size, "max_position_embeddings": c.max_positions,
            "rope_theta": c.rope_theta, "hidden_act": "silu", "tie_word_embeddings": False,
            "qkv_bias": c.attention_bias}


def output_layer_ids(head: EagleHead) -> list[int] | None:
    """The head's layers as SGLang/SpecForge ids (output of layer id); None (the default) when the head
    states none and does not know its target's depth."""
    c = head.config
    if c.target_num_layers is not None:
        return [(i % (c.target_num_layers + 1)) - 1 for i in c.layers_for(c.target_num_layers)]
    if c.target_layers is None:
        return None
    if any(i < 0 for i in c.target_layers):
        raise ValueError("the head reads layers counted from the end and does not know the target's depth")
    return [i - 1 for i in c.target_layers]


def write_specforge(head: EagleHead, folder, dtype: torch.dtype = torch.bfloat16) -> Path:
    """An EAGLE-3 head as SpecForge exports it for SGLang (config.json + model.safetensors)."""
    if not isinstance(head, Eagle3Head):
        raise ValueError("the SpecForge layout holds EAGLE-3 heads; write an EAGLE-1 head with format='eagle'")
    c = head.config
    config = {**draft_config(head), "architectures": ["LlamaForCausalLMEagle3"],
              "draft_vocab_size": c.draft_vocab_size or c.vocab_size}
    ids = output_layer_ids(head)
    if ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}
    if c.target_hidden_size is not None:
        config["target_hidden_size"] = c.target_hidden_size
    return write_folder(folder, config, stored_tensors(head, dtype))


def write_eagle(head: EagleHead, folder, dtype: torch.dtype = torch.bfloat16) -> Path:
    """An EAGLE-1/2 head in SafeAILab's layout (without the embedding copy: it is the target's)."""
    if head.config.architecture != "eagle":
        raise ValueError("SafeAILab's EAGLE-1 layout holds EAGLE-1/2 heads; "
                         "write an EAGLE-3 head with format='specforge'")
    config = {**draft_config(head), "architectures": ["LlamaForCausalLM"], "bias": head.config.fc_bias}
    return write_folder(folder, config, stored_tensors(head, dtype))


def write_folder(folder, config: dict, state: dict) -> Path:
    from safetensors.torch import save_file

    folder = Path(folder)
    with files.replacing(folder / "model.safetensors") as temporary:
        save_file(state, temporary)
    files.write_json(folder / "config.json", config)
    return folder


WRITERS.update(specforge=write_specforge, eagle=write_eagle)
