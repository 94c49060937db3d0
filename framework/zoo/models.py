"""The zoo's model family: a Llama-style target and a one-layer draft on the same tokenizer.

Parameter counts at vocab 6144 (untied embeddings; counted by tests/zoo/test_models.py):
    target_config: 7 layers, hidden 256, 8 heads (4 KV), MLP 768  -> 8,654,592 params
    draft_config:  1 layer,  hidden 256, same heads and MLP        -> 3,932,928 params
The draft shares the target's width so a feature-level head (EAGLE) could later reuse its shapes.
"""

from __future__ import annotations

from transformers import LlamaConfig


def llama_config(vocab_size: int, num_layers: int, hidden_size: int = 256, num_heads: int = 8,
                 num_kv_heads: int = 4, intermediate_size: int = 768, max_positions: int = 1024,
                 bos_token_id: int = 0, eos_token_id: int = 0) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_positions, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
        pad_token_id=eos_token_id, tie_word_embeddings=False, rope_theta=10000.0)


def target_config(vocab_size: int, **overrides) -> LlamaConfig:
    return llama_config(vocab_size, **{"num_layers": 7, **overrides})


def draft_config(vocab_size: int, **overrides) -> LlamaConfig:
    return llama_config(vocab_size, **{"num_layers": 1, **overrides})
