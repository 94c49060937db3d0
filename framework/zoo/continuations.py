"""The target's own continuations of corpus prompts: the text a head meets when decoding.

At greedy, token t+1 is always the target's argmax after t, unlike the corpus; Medusa and EAGLE
measure their per-depth acceptance on these (and may train on them). Made once per setting into
the zoo root and reused.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tqdm import tqdm

from framework.core import files
from framework.core.sampling import SamplingConfig, hf_sampling
from framework.data.token_data import TokenData


@torch.no_grad()
def self_generated(target, data: TokenData, sequences: int, prompt_tokens: int, new_tokens: int,
                   temperatures: tuple[float, ...] = (0.0, 1.0), batch: int = 128, seed: int = 0) -> torch.Tensor:
    """The target's own continuations of random corpus prompts: [sequences, prompt_tokens + new_tokens].

    What the heads meet when decoding is the target's own text (at greedy, token t+1 is always
    argmax z_t, which h_t determines), not the corpus; an equal share per temperature (0 = greedy)."""
    generator = torch.Generator().manual_seed(seed)
    device = next(target.parameters()).device
    rows = []
    for first in tqdm(range(0, sequences, batch), desc="target continuations"):
        n = min(batch, sequences - first)
        prompts = data.batch(n, prompt_tokens, generator)[0].to(device)
        temperature = temperatures[(first // batch) % len(temperatures)]
        torch.manual_seed(seed + first)  # HF sampling draws from the global generator
        out = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, pad_token_id=0,
                              **hf_sampling(SamplingConfig(temperature=temperature)))
        rows.append(out[:, : prompt_tokens + new_tokens].cpu())
    return torch.cat(rows)


def cached_continuations(target, data: TokenData, root: Path, name: str, g, sequences: int) -> TokenData:
    """The target's continuations of `sequences` prompts from `data` (settings g: prompt_tokens,
    new_tokens, temperatures, batch), made once into root: rows [N, T], the continuation's tokens the
    labels. The cache is named by the tokenizer too: another target's continuations are never read."""
    cache = Path(root) / (f"continuations_{name}_{sequences}x{g.prompt_tokens}+{g.new_tokens}"
                          f"_{data.tokenizer_hash[:12]}.pt")
    made = files.load_torch(cache, "cached continuations")
    if made is None:  # absent, or unreadable (moved aside): made again
        made = self_generated(target, data, sequences, g.prompt_tokens, g.new_tokens, tuple(g.temperatures), g.batch)
        files.save_torch(made, cache)
    labels = torch.zeros_like(made, dtype=torch.bool)
    labels[:, g.prompt_tokens :] = True
    return TokenData(made, labels, data.tokenizer_hash, data.tokenizer_name)
