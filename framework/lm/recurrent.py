"""Recurrent layers (linear attention, gated DeltaNet, Mamba-style: transformers' `linear_attention` layer type) in
the slot cache: their state follows one sequence, so a verify forward is a chain, and a commit rolls each row's
state back to its accepted depth.

transformers keeps such a layer's state in a LinearAttentionLayer that can record its past: during a forward of
P tokens it keeps the state before them and after each (the model computes them one token at a time for the last
`recurrent_states_to_keep` tokens), and the convolution's inputs in full. A commit of c_b tokens in row b takes the
recurrent state after c_b tokens and the convolution window ending there, per row (transformers' own `crop` cuts
every row alike), then stops recording. A prefill records nothing: all of it is kept.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import LinearAttentionCacheLayerMixin


def is_recurrent(layer) -> bool:
    return isinstance(layer, LinearAttentionCacheLayerMixin)


def record(layers, tokens: int) -> None:
    """Before a forward of `tokens` tokens that a commit may cut short: keep each token's state (0: none)."""
    for layer in layers:
        layer.record_past = tokens > 0
        layer.recurrent_states_to_keep = tokens
        layer.recurrent_states_history = {i: [] for i in range(layer.number_of_states)}


def keep(layers, counts: torch.Tensor, pending: int) -> None:
    """After a forward of `pending` tokens: row b keeps the state after its first counts[b] of them."""
    for layer in layers:
        if not layer.record_past:
            if bool((counts != pending).any()):
                raise ValueError("a recurrent layer did not record its past: only a whole forward can be kept")
            continue
        for i in range(layer.number_of_states):
            if layer.is_recurrent_states_initialized[i]:
                history = [*layer.recurrent_states_history[i], layer.recurrent_states[i]]  # state after 0..P tokens
                if len(history) < pending + 1:  # a model that does not hand back each token's state
                    raise ValueError(f"a recurrent layer recorded {len(history) - 1} of the {pending} states a commit "
                                     "needs: this model computes no per-token state, so it verifies no chain")
                after = torch.stack(history[-(pending + 1):])  # [P+1, B, ...]: the recorded span ends at P
                rows = torch.arange(counts.shape[0], device=after.device)
                layer.recurrent_states[i] = after[counts.to(after.device), rows].contiguous()
            if layer.is_conv_states_initialized[i]:
                full, size = layer.conv_states[i], layer.conv_kernel_size[i]  # [B, C, K + P]: window, then inputs
                if full.shape[-1] < size + pending:  # a prefill's inputs come with no window before them:
                    full = torch.nn.functional.pad(full, (size + pending - full.shape[-1], 0))  # the zeros it starts on
                end = full.shape[-1] - pending + counts.to(full.device)  # [B]
                at = end[:, None] - size + torch.arange(size, device=full.device)  # [B, K] the window ending there
                layer.conv_states[i] = full.gather(-1, at[:, None, :].expand(-1, full.shape[1], -1)).contiguous()
        layer.cumulative_length_linear.sub_(pending - int(counts.max()))
        record([layer], 0)


def select(layers, rows: torch.Tensor) -> None:
    for layer in layers:
        layer.reorder_cache(rows)
