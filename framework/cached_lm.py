"""A Hugging Face causal LM with a KV cache that keeps or drops rows per batch row.

The cache holds committed slots, then the pending slots of the forwards since the last
`keep`. Every forward passes a TreeMask (committed slots by the row's `valid` mask, pending and
new slots by a tree mask) and explicit position ids, so rows may commit different numbers of
tokens (holes stay masked) and tree nodes see only their own path. The mask goes compactly to
the registered tree attention, or dense (4D) to any other attention implementation.
Driven only through public transformers APIs: `cache=`, 4D masks, `cache.layers[i].keys/values`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from framework.tree_mask import TreeMask


@dataclass
class LMOutput:
    logits: torch.Tensor  # [B, M', V] for the rows asked for
    hidden: torch.Tensor | None  # [B, M', L, H] hidden states of the chosen layers, if any


def sliding_window(config) -> int | None:
    """The window a 4D mask would have to enforce; we refuse sequences that reach it instead."""
    window = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True) is False or not isinstance(window, int):
        return None
    return window


def context_length(config) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


class CachedLM:
    def __init__(self, model, hidden_layers: tuple[int, ...] = (), tree_backend: str | None = None):
        """tree_backend: None passes a dense 4D mask (any attention implementation); a backend
        name ("auto", "triton", "reference") passes the compact TreeMask to the registered
        tree attention, which the model must be running."""
        if not hasattr(model, "config") or not callable(model):
            raise ValueError("expected a Hugging Face causal LM (AutoModelForCausalLM)")
        self.model = model
        self.tree_backend = tree_backend
        self.hidden_layers = tuple(hidden_layers)
        self.max_positions = context_length(model.config)
        self.window = sliding_window(model.config)
        self.cache: DynamicCache | None = None
        self.valid = torch.zeros(0, 0, dtype=torch.bool)  # [B, S0] committed slots in use
        self.length = torch.zeros(0, dtype=torch.long)  # [B] committed tokens = next position
        self.committed_slots = 0  # S0; slots after it are pending

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def batch_size(self) -> int:
        return self.length.shape[0]

    def reset(self, batch_size: int) -> None:
        self.cache = DynamicCache()
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)
        self.length = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self.committed_slots = 0

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,  # [B, M]
        depth: torch.Tensor,  # [M] position offset from the row's committed length
        pending_mask: torch.Tensor,  # [M, P+M] bool: which pending and new slots each input sees
        logits_rows: torch.Tensor | None = None,  # [M'] rows whose logits are needed (None: all)
    ) -> LMOutput:
        B, M = input_ids.shape
        positions = self.length[:, None] + depth.to(self.device)[None, :]  # [B, M]
        if self.max_positions is not None and int(positions.max()) >= self.max_positions:
            raise ValueError(
                f"position {int(positions.max())} exceeds the model's context of {self.max_positions} tokens"
            )
        if self.window is not None and int(positions.max()) >= self.window:
            raise ValueError(
                f"position {int(positions.max())} reaches the model's sliding window of {self.window}: "
                "windowed attention is not supported by the tree mask"
            )
        tree_mask = TreeMask(self.valid, pending_mask.to(self.device))
        if self.tree_backend is None:
            masks = {"attention_mask": tree_mask.dense()}  # [B, 1, M, S+M] for any attention
        else:
            masks = {"speculum_mask": tree_mask, "speculum_backend": self.tree_backend}
        out = self.model(
            input_ids=input_ids.to(self.device),
            **masks,
            position_ids=positions,
            cache=self.cache,
            use_cache=True,
            output_hidden_states=bool(self.hidden_layers),
            logits_to_keep=logits_rows.to(self.device) if logits_rows is not None else 0,
        )
        hidden = None
        if self.hidden_layers:
            rows = slice(None) if logits_rows is None else logits_rows.to(self.device)
            hidden = torch.stack([out.hidden_states[i][:, rows] for i in self.hidden_layers], dim=2)
        return LMOutput(out.logits, hidden)

    def keep(self, slots: torch.Tensor, counts: torch.Tensor) -> None:
        """Commit, per row, the first counts[b] of the pending slots listed in slots[b]; drop the rest.

        slots [B, K] index the pending slots (0 = first slot after the committed ones).
        """
        S0 = self.committed_slots
        B, K = slots.shape
        if int(counts.max()) > K:
            raise ValueError(f"asked to keep {int(counts.max())} slots but only {K} were listed")
        index = (S0 + slots.clamp_min(0)).to(self.device)  # [B, K]
        pending = self.cache.layers[0].keys.shape[2] - S0
        in_place = K == pending and bool((slots == torch.arange(K, device=slots.device)).all())
        for layer in [] if in_place else self.cache.layers:  # already laid out as kept: no copy
            for name in ("keys", "values"):
                tensor = getattr(layer, name)  # [B, H, S, D]
                gathered = tensor.gather(2, index[:, None, :, None].expand(-1, tensor.shape[1], -1, tensor.shape[3]))
                setattr(layer, name, torch.cat([tensor[:, :, :S0], gathered], dim=2))
        kept = torch.arange(K, device=self.device)[None, :] < counts.to(self.device)[:, None]  # [B, K]
        self.valid = torch.cat([self.valid, kept], dim=1)
        self.length = self.length + counts.to(self.device)
        self.committed_slots = S0 + K

    def keep_path(self, path: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """After a tree forward laid out as [root, node 0, node 1, ...]: keep the root and the
        accepted nodes (path [B, depth], node indices, -1 padded)."""
        root_slot = torch.zeros(path.shape[0], 1, dtype=torch.long, device=path.device)
        self.keep(torch.cat([root_slot, path + 1], dim=1), num_accepted + 1)

    def expand(self, batch_size: int) -> None:
        """Replicate a single-row state into batch_size rows (shared prefill across samples)."""
        if self.batch_size != 1:
            raise ValueError("expand needs a state with one row")
        self.cache.batch_repeat_interleave(batch_size)
        self.valid = self.valid.expand(batch_size, -1).clone()
        self.length = self.length.expand(batch_size).clone()
