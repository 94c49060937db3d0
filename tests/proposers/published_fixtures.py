"""Published head folders built in the tests, and reference forwards written from the published description.

The fixtures carry the published file names, keys, shapes, dtypes and configs with tiny random
weights (docs/design.md section 12). The reference forwards are plain torch, written from the
description of each architecture, never by calling our heads: RMSNorm, rotate-half RoPE,
grouped-query causal attention, SiLU MLP.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

H, V, HEADS, KV, INTER = 32, 64, 4, 2, 48
HD = H // HEADS


def rand(*shape, generator, scale=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale / shape[-1] ** 0.5).to(dtype)


def layer_weights(prefix: str, width: int, generator, norms: tuple[str, ...], heads=HEADS,
                  kv=KV) -> dict[str, torch.Tensor]:
    """A Llama decoder layer's published keys; q/k/v read `width`-wide rows."""
    hd = H // heads
    w = {f"{prefix}.self_attn.q_proj.weight": rand(heads * hd, width, generator=generator),
         f"{prefix}.self_attn.k_proj.weight": rand(kv * hd, width, generator=generator),
         f"{prefix}.self_attn.v_proj.weight": rand(kv * hd, width, generator=generator),
         f"{prefix}.self_attn.o_proj.weight": rand(H, heads * hd, generator=generator),
         f"{prefix}.mlp.gate_proj.weight": rand(INTER, H, generator=generator),
         f"{prefix}.mlp.up_proj.weight": rand(INTER, H, generator=generator),
         f"{prefix}.mlp.down_proj.weight": rand(H, INTER, generator=generator)}
    for norm in norms:
        w[f"{prefix}.{norm}.weight"] = 1 + 0.1 * torch.randn(H, generator=generator)
    return w


def llama_config(vocab=V, **extra) -> dict:
    return {"hidden_size": H, "intermediate_size": INTER, "num_attention_heads": HEADS, "num_hidden_layers": 1,
            "rms_norm_eps": 1e-6, "vocab_size": vocab, "max_position_embeddings": 256, "model_type": "llama",
            "num_key_value_heads": KV, **extra}


def write(folder: Path, config: dict, state: dict, weights: str = "model.safetensors") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if weights.endswith(".safetensors"):
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / weights))
    else:
        torch.save(state, folder / weights)
    return folder


def eagle1_folder(folder: Path, target, seed=0, bias=True, config_bias: bool | None = None, rope_theta=None,
                  weights="pytorch_model.bin", embedding=None) -> Path:
    """SafeAILab's EAGLE-1 layout: fc (+bias), layers.0 without input_layernorm, the embedding copy."""
    g = torch.Generator().manual_seed(seed)
    state = {"fc.weight": rand(H, 2 * H, generator=g),
             **layer_weights("layers.0", H, g, ("post_attention_layernorm",), heads=2, kv=2)}
    if bias:
        state["fc.bias"] = 0.1 * torch.randn(H, generator=g)
    state["embed_tokens.weight"] = (target.get_input_embeddings().weight if embedding is None
                                    else embedding).detach().float().clone()
    config = llama_config(target.config.vocab_size, **({"rope_theta": rope_theta} if rope_theta else {}))
    del config["num_key_value_heads"]
    config["num_attention_heads"] = 2  # Vicuna's config: no kv-heads key, so kv heads = heads
    if config_bias is not None:
        config["bias"] = config_bias
    return write(folder, config, state, weights)


def eagle3_folder(folder: Path, seed=0, draft_vocab=16, ids=None, extra_config=None, embed=False,
                  target_hidden=None, vocab=V, maps=True) -> Path:
    """SafeAILab's / SpecForge's EAGLE-3 layout: midlayer.*, fc [H, 3H_t], norm, lm_head [Vd, H], d2t, t2d."""
    g = torch.Generator().manual_seed(seed)
    Ht = target_hidden or H
    state = {"fc.weight": rand(H, 3 * Ht, generator=g), "norm.weight": 1 + 0.1 * torch.randn(H, generator=g),
             "lm_head.weight": rand(draft_vocab, H, generator=g),
             **layer_weights("midlayer", 2 * H, g, ("input_layernorm", "hidden_norm", "post_attention_layernorm"))}
    used = torch.randperm(vocab, generator=g)[:draft_vocab].sort().values
    if maps:
        state["d2t"] = used - torch.arange(draft_vocab)
        state["t2d"] = torch.zeros(vocab, dtype=torch.bool)
        state["t2d"][used] = True
    if embed:
        state["embed_tokens.weight"] = rand(vocab, H, generator=g) * H**0.5
    config = llama_config(vocab, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=draft_vocab,
                          **(extra_config or {}))
    if ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}
    if target_hidden:
        config["target_hidden_size"] = target_hidden
    return write(folder, config, state)


def load_state(folder: Path) -> dict:
    from safetensors.torch import load_file

    file = folder / "model.safetensors"
    return {k: v.double() if v.is_floating_point() else v for k, v in
            (load_file(str(file)) if file.exists() else torch.load(folder / "pytorch_model.bin")).items()}


# --- the reference forward, from the published description -------------------------------------------------

def rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, positions, theta):
    """x [B, heads, T, d]; the rotate-half convention of Llama."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.double()[:, None] * inv[None]  # [T, d/2]
    cos, sin = torch.cat([angle, angle], -1).cos(), torch.cat([angle, angle], -1).sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention(u, s: dict, prefix: str, theta: float, heads: int, kv: int, positions) -> torch.Tensor:
    """Causal grouped-query attention of rows u [B, T, width] -> [B, T, H]."""
    B, T, _ = u.shape
    q = (u @ s[f"{prefix}.self_attn.q_proj.weight"].T).view(B, T, heads, -1).transpose(1, 2)
    k = (u @ s[f"{prefix}.self_attn.k_proj.weight"].T).view(B, T, kv, -1).transpose(1, 2)
    v = (u @ s[f"{prefix}.self_attn.v_proj.weight"].T).view(B, T, kv, -1).transpose(1, 2)
    q, k = rope(q, positions, theta), rope(k, positions, theta)
    k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
    return out @ s[f"{prefix}.self_attn.o_proj.weight"].T


def mlp(x, s: dict, prefix: str) -> torch.Tensor:
    gate = x @ s[f"{prefix}.mlp.gate_proj.weight"].T
    return ((torch.nn.functional.silu(gate) * (x @ s[f"{prefix}.mlp.up_proj.weight"].T))
            @ s[f"{prefix}.mlp.down_proj.weight"].T)


def eagle1_reference(s: dict, embedded, g, theta=10000.0, heads=2, kv=2):
    """EAGLE-1: x = fc([e ; g]); h = x + attn(x) (no input norm); h + mlp(post(h)); no final norm."""
    x = torch.cat([embedded, g], -1) @ s["fc.weight"].T + s.get("fc.bias", 0)
    positions = torch.arange(x.shape[1])
    h = x + attention(x, s, "layers.0", theta, heads, kv, positions)
    return h + mlp(rms(h, s["layers.0.post_attention_layernorm.weight"]), s, "layers.0")


def eagle3_reference(s: dict, embedded, g, theta=10000.0):
    """EAGLE-3: u = [rms_in(e) ; rms_hid(g)]; h = g + attn(u); h + mlp(post(h)); logits lm_head(norm(h)).
    g: the fused feature (fc over the target layers) or the draft's own previous output."""
    u = torch.cat([rms(embedded, s["midlayer.input_layernorm.weight"]), rms(g, s["midlayer.hidden_norm.weight"])], -1)
    h = g + attention(u, s, "midlayer", theta, HEADS, KV, torch.arange(u.shape[1]))
    h = h + mlp(rms(h, s["midlayer.post_attention_layernorm.weight"]), s, "midlayer")
    return h, rms(h, s["norm.weight"]) @ s["lm_head.weight"].T
