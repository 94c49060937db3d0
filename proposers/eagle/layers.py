"""The decoder layers of the published EAGLE drafts, with the published parameter names.

- `Eagle1Layer` (EAGLE-1/2, `layers.0.*`): a Llama decoder layer without `input_layernorm`
  (the published layer 0 skips it): h = x + attn(x); h + mlp(post_attention_layernorm(h)).
- `Eagle3Layer` (EAGLE-3, `midlayer.*`): attention reads u = [input_layernorm(embedding) ;
  hidden_norm(g)], 2H wide; the residual is the fused feature g: h = g + attn(u);
  h + mlp(post_attention_layernorm(h)).

Attention runs on the registered tree attention when a TreeMask is passed (drafting: the same
mask and back ends as the target), else on PyTorch's SDPA over a dense boolean mask (training).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, apply_rotary_pos_emb

from framework.lm.tree_attention import hf_tree_attention


class DraftAttention(nn.Module):
    """Llama attention (RoPE, grouped KV heads) whose q/k/v read `input_size`-wide rows."""

    def __init__(self, config: LlamaConfig, input_size: int):
        super().__init__()
        self.head_dim = config.head_dim
        heads, kv_heads, bias = config.num_attention_heads, config.num_key_value_heads, config.attention_bias
        self.q_proj = nn.Linear(input_size, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(input_size, kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(input_size, kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, position_embeddings, cache=None, attention_mask=None, speculum_mask=None,
                speculum_backend: str = "auto") -> torch.Tensor:
        """x [B, M, input_size] -> [B, M, H]. attention_mask: [B or 1, 1, M, S] bool (True = may attend)."""
        B, M, _ = x.shape
        q, k, v = (proj(x).view(B, M, -1, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        if cache is not None:
            k, v = cache.update(k, v, 0)
        if speculum_mask is not None:
            out = hf_tree_attention(self, q, k, v, None, speculum_mask=speculum_mask,
                                    speculum_backend=speculum_backend)[0]
        else:
            if attention_mask is None:
                attention_mask = torch.ones(M, k.shape[2], dtype=torch.bool, device=x.device).tril(k.shape[2] - M)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask[..., : k.shape[2]],
                                                 enable_gqa=q.shape[1] != k.shape[1]).transpose(1, 2)
        return self.o_proj(out.reshape(B, M, -1))


class Eagle1Layer(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.self_attn = DraftAttention(config, config.hidden_size)
        self.mlp = LlamaMLP(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, x: torch.Tensor, position_embeddings, cache=None, **attention) -> torch.Tensor:
        h = x + self.self_attn(x, position_embeddings, cache, **attention)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Layer(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        H = config.hidden_size
        self.input_layernorm = LlamaRMSNorm(H, eps=config.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(H, eps=config.rms_norm_eps)
        self.self_attn = DraftAttention(config, 2 * H)
        self.mlp = LlamaMLP(config)
        self.post_attention_layernorm = LlamaRMSNorm(H, eps=config.rms_norm_eps)

    def forward(self, embedded: torch.Tensor, feature: torch.Tensor, position_embeddings, cache=None,
                **attention) -> torch.Tensor:
        u = torch.cat([self.input_layernorm(embedded), self.hidden_norm(feature)], dim=-1)  # [B, M, 2H]
        h = feature + self.self_attn(u, position_embeddings, cache, **attention)
        return h + self.mlp(self.post_attention_layernorm(h))
