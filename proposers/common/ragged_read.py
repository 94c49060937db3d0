"""Tokens of different counts per row, read into a draft's cache in one forward, each row keeping its own."""

from __future__ import annotations

import torch

from framework.lm.cached_lm import CachedLM


def read_ragged(lm: CachedLM, rows: list[list[int]]) -> torch.Tensor:
    """Commit rows[b] (draft tokens; some rows may have none) after each row's committed text; returns the logits
    after each row's last token [B, V] (a row with none: meaningless). Rows are padded on the right; the padding's
    slots are never kept."""
    counts = torch.tensor([len(row) for row in rows])
    K = int(counts.max())
    padded = torch.tensor([row + [0] * (K - len(row)) for row in rows], device=lm.device)
    out = lm.forward(padded, torch.arange(K), torch.ones(K, K, dtype=torch.bool).tril())
    lm.keep(torch.arange(K).expand(len(rows), K), counts.to(lm.device))
    return out.logits[torch.arange(len(rows)), (counts - 1).to(out.logits.device)]
