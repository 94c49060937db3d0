"""The zoo's model family: a Llama-style target and a one-layer draft on the same tokenizer.

Parameter counts at vocab 6144 (untied embeddings; counted by tests/zoo/test_models.py):
    target_config: 20 layers, hidden 256, 8 heads (4 KV), MLP 640 -> 16,918,784 params
    draft_config:  1 layer,  hidden 256, 8 heads (4 KV), MLP 768  ->  3,932,928 params
Why 20 layers: on one CPU thread a forward of these models is mostly fixed per-layer dispatch cost,
and a deployed draft costs 0.05-0.1 of its target's forward. At 20 layers the 1-layer draft's
forward is about 1/9 of the target's (bench_loop prints the ratio); MLP 640 keeps the bf16 pair
(with tokenizers) under 45 MB. The draft shares the target's width so a feature-level head
(EAGLE) can reuse its shapes.
"""

from __future__ import annotations

from transformers import LlamaConfig


def llama_config(vocab_size: int, num_layers: int, hidden_size: int = 256, num_heads: int = 8,
                 num_kv_heads: int = 4, intermediate_size: int = 768, max_positions: int = 1024,
                 bos_token_id: int = 0, eos_token_id: int = 0, attention_dropout: float = 0.0) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_positions, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
        pad_token_id=eos_token_id, tie_word_embeddings=False, rope_theta=10000.0,
        attention_dropout=attention_dropout)


def target_config(vocab_size: int, **overrides) -> LlamaConfig:
    return llama_config(vocab_size, **{"num_layers": 20, "intermediate_size": 640, **overrides})


def draft_config(vocab_size: int, **overrides) -> LlamaConfig:
    return llama_config(vocab_size, **{"num_layers": 1, **overrides})


def multiply_adds_per_token(config: LlamaConfig) -> int:
    """Weight multiply-adds of one token's forward: every layer's projections and MLP, then the
    output head (attention over the context and the embedding lookup left out)."""
    hidden, head_dim = config.hidden_size, config.hidden_size // config.num_attention_heads
    attention = 2 * hidden * hidden + 2 * hidden * config.num_key_value_heads * head_dim  # q, o; k, v
    return config.num_hidden_layers * (attention + 3 * hidden * config.intermediate_size) + hidden * config.vocab_size
