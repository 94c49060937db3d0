"""Tiny random-weight Hugging Face models built from configs (tests, and defaults until the zoo).

No hub access: every model is made from a config, with seeded weights. `init_std` widens the
weights so that next-token laws are peaked like a trained model's rather than near uniform.
"""

from __future__ import annotations

import torch
import transformers

from framework.lm.sharding import placed_copy

ARCHITECTURES = {
    "llama": lambda v, h, l, nh, kv, pos: transformers.LlamaConfig(
        vocab_size=v, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=l,
        num_attention_heads=nh, num_key_value_heads=kv, max_position_embeddings=pos),
    "qwen2": lambda v, h, l, nh, kv, pos: transformers.Qwen2Config(
        vocab_size=v, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=l,
        num_attention_heads=nh, num_key_value_heads=kv, max_position_embeddings=pos),
    "mistral": lambda v, h, l, nh, kv, pos: transformers.MistralConfig(
        vocab_size=v, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=l,
        num_attention_heads=nh, num_key_value_heads=kv, max_position_embeddings=pos, sliding_window=None),
    "gpt2": lambda v, h, l, nh, kv, pos: transformers.GPT2Config(
        vocab_size=v, n_embd=h, n_layer=l, n_head=nh, n_positions=pos,
        bos_token_id=0, eos_token_id=0),
}


def sizes_stated(**sizes) -> None:
    """Random-weight parts (models=tiny) take the sizes of a tiny_* target (`${oc.select:target.vocab_size,null}` in their
    configs): composed with a target that states none (the zoo's, a checkpoint loaded by path) they are None."""
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
):
    """device_map / tp_plan: the model placed by layers or sharded by heads (framework/lm/sharding.py); every
    torchrun rank builds the same seeded weights."""
    sizes_stated(vocab_size=vocab_size, max_positions=max_positions)
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r} (have {sorted(ARCHITECTURES)})")
    config = ARCHITECTURES[arch](vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, max_positions)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    if init_std is not None:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if param.dim() >= 2:
                    param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * init_std)
    if device_map is not None or tp_plan is not None:
        return placed_copy(model, device_map, tp_plan)
    return model.eval()
