"""A batch of prompts of different lengths: one LongTensor [B, L], each row's prompt first, then -1 padding.

The -1 is the project's one padding mark (emitted tokens and accepted paths use it too), so a part that forgets
the padding fails at the first embedding lookup instead of decoding pad tokens. Every part that reads the prompt
reads each row's own tokens (`prompt_rows`) or its length (`prompt_lengths`): positions start at 0 in every row,
and no row's law sees another's padding. Users give a list of prompts, or a [B, L] batch with an attention mask
padded on either side; `ragged_batch` turns both into this form.
"""

from __future__ import annotations

import torch

PAD = -1


def ragged_batch(prompts, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """prompts: [B, L] ids (with `attention_mask` [B, L]: 1 = a prompt token, 0 = padding on either side), or a
    list of 1-D prompts (tensors or lists of ids) -> [B, L'] right-padded with -1. Bad input is named here."""
    if isinstance(prompts, torch.Tensor):
        if prompts.is_nested or prompts.dim() != 2 or prompts.dtype != torch.long:
            raise ValueError("input_ids must be a LongTensor [B, L], not nested (rows of different lengths: a list of "
                             "prompts, or an attention_mask marking each row's padding)")
        if prompts.is_meta:
            raise ValueError("input_ids is on the meta device: it holds no token ids")
        if attention_mask is None:
            check_ragged(prompts)
            return prompts
        if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != tuple(prompts.shape):
            raise ValueError(f"attention_mask must be [B, L] = {list(prompts.shape)} like input_ids, got "
                             f"{tuple(getattr(attention_mask, 'shape', ())) or type(attention_mask).__name__}")
        keep = attention_mask.bool().cpu()
        for b, row in enumerate(keep):
            at = row.nonzero().flatten()
            if at.numel() and int(at[-1] - at[0]) + 1 != at.numel():
                raise ValueError(f"attention_mask row {b} has padding between prompt tokens: pad on the left or the "
                                 "right of each prompt only")
        rows = [prompts[b].cpu()[keep[b]] for b in range(prompts.shape[0])]
    elif isinstance(prompts, (list, tuple)) and attention_mask is None:
        rows = [torch.as_tensor(p, dtype=torch.long).cpu() if not isinstance(p, torch.Tensor) else p.cpu()
                for p in prompts]
        if any(r.dtype != torch.long or r.dim() != 1 for r in rows):
            raise ValueError("each prompt of a list must be a 1-D sequence of token ids")
    else:
        raise ValueError(f"prompts must be a LongTensor [B, L] or a list of 1-D prompts, got {type(prompts).__name__}"
                         + (" with an attention_mask (a mask goes with a [B, L] tensor)"
                            if attention_mask is not None else ""))
    if not rows:
        raise ValueError("input_ids has no rows: give at least one prompt")
    for b, row in enumerate(rows):
        if row.numel() == 0:
            raise ValueError(f"the prompt of row {b} is empty: give at least one token")
    batch = torch.full((len(rows), max(r.numel() for r in rows)), PAD, dtype=torch.long)
    for b, row in enumerate(rows):
        batch[b, : row.numel()] = row
    check_ragged(batch)
    return batch


def check_ragged(batch: torch.Tensor) -> None:
    """A batch in this module's form: no negative id but the trailing -1 padding, no empty row."""
    if batch.shape[0] == 0:
        raise ValueError("input_ids has no rows: give at least one prompt")
    if batch.shape[1] == 0:
        raise ValueError("the prompt is empty: give at least one token")
    ids = batch.cpu()
    if bool((ids < PAD).any()):
        raise ValueError(f"prompt token ids must be >= 0 (-1 marks the padding after a shorter prompt), "
                         f"got {int(ids.min())}")
    padding = ids == PAD
    empty = padding[:, 0].nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"the prompt of row {empty[0]} is empty: give at least one token")
    if bool((padding[:, 1:].long() < padding[:, :-1].long()).any()):
        raise ValueError("a prompt has -1 between its tokens: -1 pads after a row's prompt only (give a list of "
                         "prompts, or an attention_mask, for padding on the left)")


def prompt_lengths(batch: torch.Tensor) -> torch.Tensor:
    """[B, L] -> [B] tokens in each row's prompt, on the batch's device."""
    return (batch != PAD).sum(1)


def prompt_rows(batch: torch.Tensor) -> list[list[int]]:
    """Each row's prompt, without padding."""
    return [[t for t in row if t != PAD] for row in batch.tolist()]


def is_ragged(batch: torch.Tensor) -> bool:
    return bool((batch[:, -1] == PAD).any())


def last_of_each(per_position: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """per_position [B, L, ...] -> [B, ...]: each row's entry at its prompt's last position."""
    rows = torch.arange(per_position.shape[0], device=per_position.device)
    return per_position[rows, (lengths - 1).to(per_position.device)]
