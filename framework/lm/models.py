"""Tiny random-weight Hugging Face models built from configs (tests, and defaults until the zoo).

No hub access: every model is made from a config, with seeded weights. `init_std` widens the
weights so that next-token laws are peaked like a trained model's rather than near uniform.
"""

from __future__ import annotations

import torch
import transformers

from framework.lm.sharding import placed_copy


def common(v, h, n, nh, kv, pos) -> dict:
    return dict(vocab_size=v, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=n, num_attention_heads=nh,
                num_key_value_heads=kv, max_position_embeddings=pos, head_dim=h // nh)


def without_head_dim(kwargs: dict) -> dict:
    """MLA's config derives its head dims (head_dim: the rope part) from its own fields."""
    return {k: value for k, value in kwargs.items() if k != "head_dim"}


def alternating(layers: int) -> list[str]:
    """Sliding layers with a global one after each (GPT-OSS alternates; Gemma-3 puts one global after five)."""
    return ["full_attention" if i % 2 else "sliding_attention" for i in range(layers)]


# Each stack in its published shape, at tiny sizes: what differs between them is what the tree path must get right
# (rope scaling, q/k norms, routed experts, sliding windows with global layers, attention sinks). `w` is the
# sliding window (None: the stack's full-attention form; gpt2, llama, qwen2, qwen3 have none to give).
ARCHITECTURES = {
    "llama": lambda v, h, n, nh, kv, pos, w: transformers.LlamaConfig(**common(v, h, n, nh, kv, pos)),
    "llama3": lambda v, h, n, nh, kv, pos, w: transformers.LlamaConfig(  # Llama-3.1's rope scaling, scaled to tiny
        **common(v, h, n, nh, kv, pos), rope_parameters=dict(
            rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=64)),
    "qwen2": lambda v, h, n, nh, kv, pos, w: transformers.Qwen2Config(**common(v, h, n, nh, kv, pos)),
    "qwen3": lambda v, h, n, nh, kv, pos, w: transformers.Qwen3Config(**common(v, h, n, nh, kv, pos)),
    "qwen3_moe": lambda v, h, n, nh, kv, pos, w: transformers.Qwen3MoeConfig(
        **common(v, h, n, nh, kv, pos), num_experts=4, num_experts_per_tok=2, moe_intermediate_size=h,
        decoder_sparse_step=1, norm_topk_prob=True),
    "mixtral": lambda v, h, n, nh, kv, pos, w: transformers.MixtralConfig(
        **common(v, h, n, nh, kv, pos), num_local_experts=4, num_experts_per_tok=2, sliding_window=w),
    "mistral": lambda v, h, n, nh, kv, pos, w: transformers.MistralConfig(
        **common(v, h, n, nh, kv, pos), sliding_window=w),
    "gemma3": lambda v, h, n, nh, kv, pos, w: transformers.Gemma3TextConfig(
        **common(v, h, n, nh, kv, pos), sliding_window=w or pos, layer_types=alternating(n),
        # tied, a random scaled embedding makes the last token win every step
        query_pre_attn_scalar=h // nh, tie_word_embeddings=False),
    "gpt_oss": lambda v, h, n, nh, kv, pos, w: transformers.GptOssConfig(
        **common(v, h, n, nh, kv, pos), num_local_experts=4, num_experts_per_tok=2, sliding_window=w or pos,
        layer_types=alternating(n), rope_parameters=dict(  # GPT-OSS's YaRN, its 32x stretch cut to the tiny context
            rope_type="yarn", rope_theta=150000.0, factor=max(1.0, pos / 64), original_max_position_embeddings=64,
            beta_fast=32.0, beta_slow=1.0, truncate=False)),
    "qwen3_next": lambda v, h, n, nh, kv, pos, w: transformers.Qwen3NextConfig(  # gated DeltaNet + gated attention
        **common(v, h, n, nh, kv, pos), linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=h // nh,
        linear_value_head_dim=h // nh, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=h, shared_expert_intermediate_size=h, decoder_sparse_step=1,
        layer_types=["linear_attention" if i % 2 == 0 else "full_attention" for i in range(n)]),
    "deepseek_v3": lambda v, h, n, nh, kv, pos, w: transformers.DeepseekV3Config(  # MLA (its query/key head 3/2 of
        # its value head: the rope part rides on top) and routed experts with a shared one after a dense first layer
        **without_head_dim(common(v, h, n, nh, nh, pos)), q_lora_rank=h, kv_lora_rank=h // 2,
        qk_rope_head_dim=h // nh // 2, qk_nope_head_dim=h // nh, v_head_dim=h // nh, n_routed_experts=4,
        num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=h, first_k_dense_replace=1, n_group=1,
        topk_group=1, num_nextn_predict_layers=0),  # the target alone: MTP modules are added apart
    "glm4_moe": lambda v, h, n, nh, kv, pos, w: transformers.Glm4MoeConfig(  # GLM-4.5: half-rotary, q/k/v biases
        **common(v, h, n, nh, kv, pos), attention_bias=True, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, moe_intermediate_size=h, first_k_dense_replace=1, n_group=1, topk_group=1,
        num_nextn_predict_layers=0),
    "gpt2": lambda v, h, n, nh, kv, pos, w: transformers.GPT2Config(
        vocab_size=v, n_embd=h, n_layer=n, n_head=nh, n_positions=pos, bos_token_id=0, eos_token_id=0),
}


def sizes_stated(**sizes) -> None:
    """Random-weight parts (models=tiny) take the sizes of a tiny_* target (`${oc.select:target.vocab_size,null}` in
    their configs): composed with a target that states none (the zoo's, a checkpoint loaded by path) they are None."""
    missing = [name for name, value in sizes.items() if value is None]
    if missing:
        raise ValueError(f"{', '.join(missing)} not given: the parts of models=tiny read the sizes of a tiny_* target "
                         "(target=tiny_llama, ...), and this target states none; give models=tiny a tiny_* target "
                         "and models=zoo a checkpoint")


def tiny_random_model(
    arch: str = "llama",
    vocab_size: int = 64,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    max_positions: int = 256,
    seed: int = 0,
    dtype: str = "float32",
    init_std: float | None = None,
    device_map=None,
    tp_plan=None,
    sliding_window: int | None = None,
):
    """sliding_window: the window of a stack that has sliding layers (mistral, mixtral, gemma3, gpt_oss).
    device_map / tp_plan: the model placed by layers or sharded by heads (framework/lm/sharding.py); every
    torchrun rank builds the same seeded weights."""
    sizes_stated(vocab_size=vocab_size, max_positions=max_positions)
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r} (have {sorted(ARCHITECTURES)})")
    config = ARCHITECTURES[arch](vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, max_positions,
                                 sliding_window)
    torch.manual_seed(seed)
    # Routed experts run as torch's grouped_mm by default, which has no float64 kernel: the loop over experts does.
    experts = {"experts_implementation": "eager"} if dtype == "float64" else {}
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype), **experts)
    if init_std is not None:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for param in model.parameters():
                if param.dim() >= 2:
                    param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * init_std)
    if device_map is not None or tp_plan is not None:
        return placed_copy(model, device_map, tp_plan)
    return model.eval()
