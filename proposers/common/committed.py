"""The positions the target committed, as feature-reading drafters (EAGLE, P-EAGLE, DFlash) receive them.

Each step the engine hands the hidden states of the positions its last forward committed
(DecodeState.committed_hidden, left-aligned per row, committed_count valid); a step that drafts
nothing leaves them for the next step that does, so runs of them are joined here.
"""

from __future__ import annotations

import torch


def left_aligned(
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ragged runs of positions (hidden [B, A, L, H], tokens [B, A], count [B], each left-aligned), one after
    another per row -> one left-aligned run (hidden, tokens, count)."""
    if len(parts) == 1:
        return parts[0]
    hidden = torch.cat([h for h, _, _ in parts], dim=1)
    tokens = torch.cat([t for _, t, _ in parts], dim=1)
    valid = torch.cat([torch.arange(t.shape[1], device=c.device)[None, :] < c[:, None]
                       for _, t, c in parts], dim=1)  # [B, A']
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)  # the valid positions first, in their order
    hidden = hidden.gather(1, order.to(hidden.device).view(*order.shape, 1, 1).expand(-1, -1, *hidden.shape[2:]))
    return hidden, tokens.gather(1, order.to(tokens.device)), valid.sum(1)


def ragged_then_block(count: torch.Tensor, width: int, block: int) -> torch.Tensor:
    """A causal mask [B, M, M] (M = width + block) over, per row, a left-aligned run of `width` slots of which the
    first count[b] are real, then `block` slots every row has. Block rows see only real run slots (a short row's
    holes are hidden); run rows see the run causally (a hole's row is read by no one)."""
    slot = torch.arange(width + block, device=count.device)
    causal = slot[None, :] <= slot[:, None]  # [M, M]
    real = (slot[None, :] < count[:, None]) | (slot[None, :] >= width)  # [B, M]
    return causal[None] & (real[:, None, :] | (slot[None, :, None] < width))
