"""A Hugging Face causal LM with a KV cache that keeps or drops rows per batch row (SlotCache).

Every forward passes a TreeMask (committed slots by the row's `valid` mask, pending and new
slots by a tree mask) and explicit position ids, so rows may commit different numbers of
tokens (holes stay masked) and tree nodes see only their own path. The mask goes compactly to
the registered tree attention, or dense (4D) to any other attention implementation; for a model with
sliding-window layers it carries the slots' positions, so each node sees the window its own position gives it.
Driven only through public transformers APIs: `cache=`, 4D masks, `cache.layers[i].keys/values`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framework.lm import recurrent
from framework.lm.compiled import EagerFallback
from framework.lm.packing import Packing
from framework.lm.slot_cache import SlotCache
from framework.lm.windows import AttentionWindows, dense_mask_form


@dataclass
class LMOutput:
    logits: torch.Tensor  # [B, M', V] for the rows asked for
    hidden: torch.Tensor | None  # [B, M' (M if all_hidden), L, H] hidden states of the chosen layers, if any


def context_length(config) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def input_device(model) -> torch.device:
    """The device a model's inputs go to: its input embedding's, or, where accelerate offloaded that layer, the
    device its hook runs it on."""
    embedding = model.get_input_embeddings()
    executes = getattr(getattr(embedding, "_hf_hook", None), "execution_device", None)
    if executes is not None:
        return torch.device(executes)
    return embedding.weight.device


class CachedLM(SlotCache):
    def __init__(self, model, hidden_layers: tuple[int, ...] = (), tree_backend: str | None = None,
                 compile: bool = False):
        """tree_backend: None passes a dense 4D mask (any attention implementation); a backend
        name ("auto", "triton", "sdpa", "reference") passes the compact TreeMask to the registered
        tree attention, which the model must be running. compile: run the forward through
        torch.compile (falling back to eager on failure, see framework.lm.compiled)."""
        super().__init__()
        if not hasattr(model, "config") or not callable(model):
            raise ValueError("expected a Hugging Face causal LM (AutoModelForCausalLM)")
        self.model = model
        self.call = EagerFallback(model, compile)
        self.tree_backend = tree_backend
        self.hidden_layers = tuple(hidden_layers)
        self.max_positions = context_length(model.config)
        self.windows = AttentionWindows.of(model.config)

    @property
    def device(self) -> torch.device:
        """Where inputs go and outputs come back: the input embedding's device (for a target placed across
        devices, where accelerate runs that layer; an offloaded layer's weights sit on "meta")."""
        return input_device(self.model)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def run_beside(self, target) -> None:
        """A draft beside `target`: in its dtype (refused otherwise: the laws would differ), on the device its inputs
        go to (moved there once, as heads are: the first device of a placed target, or this rank's)."""
        if self.dtype != target.dtype:
            raise ValueError(f"draft in {self.dtype} but target in {target.dtype}: give both the same dtype")
        if self.device != target.device:
            if getattr(self.model, "hf_device_map", None):
                raise ValueError(f"draft placed by a device_map from {self.device}, "
                                 f"target's inputs on {target.device}: start both on the same device")
            self.model.to(target.device)

    def reset(self, batch_size: int) -> None:
        super().reset(batch_size, self.device, self.model.config if self.windows.recurrent else None)

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,  # [B, M]
        depth: torch.Tensor,  # [M] position offset from the row's committed length
        pending_mask: torch.Tensor,  # [M, P+M] bool: which pending and new slots each input sees
        logits_rows: torch.Tensor | None = None,  # [M'] rows whose logits are needed (None: all)
        all_hidden: bool = False,  # hidden states of every row, not only the logits rows
        keeps_all: bool = False,  # the caller keeps every input (a prefill): recurrent layers record no past
        real: torch.Tensor | None = None,  # [B, M] bool: the inputs whose outputs are read (None: all)
    ) -> LMOutput:
        """With `real`, the model may run the real inputs only, packed (framework/lm/packing.py): the others'
        logits and hidden states are then zeros (it does, on the tree attention without recurrent layers)."""
        B, M = input_ids.shape
        device = self.device
        positions = self.positions(depth)  # [B, M]
        last = int(positions.max())  # the one host sync a forward needs (a bad position must not reach the model)
        if self.max_positions is not None and last >= self.max_positions:
            raise ValueError(f"position {last} exceeds the model's context of {self.max_positions} tokens")
        tree_mask = self.tree_mask(pending_mask, positions if self.windows.windowed else None)
        if self.windows.recurrent:
            width = pending_mask.shape[-1]  # each input sees every pending slot and the inputs before it
            chain = torch.ones(M, width, dtype=torch.bool, device=pending_mask.device).tril(width - M)
            if not bool((pending_mask == chain).all()):
                raise ValueError("this target has recurrent layers (linear attention): their state follows one "
                                 "sequence, so a forward verifies a chain; a tree (or side rows) needs per-node state, "
                                 "not built")
            recurrent.record(self.cache.recurrent_layers, 0 if keeps_all else M)
        packing = None
        if self.tree_backend is None:
            # [B, 1, M, S+M] (per layer type), in the form the model's attention reads (checked here: it may change)
            masks = {"attention_mask": self.windows.dense(tree_mask, dense_mask_form(self.model))}
        else:
            masks = {"speculum_mask": tree_mask, "speculum_backend": self.tree_backend}
            if real is not None and logits_rows is None and not self.windows.recurrent and not bool(real.all()):
                packing = Packing.of(real.to(device))
                masks["speculum_packing"] = packing
                input_ids, positions = packing.pack(input_ids.to(device)), packing.pack(positions)
        self.cache.packing = packing
        try:
            out = self.call(
                self.cache,
                input_ids=input_ids.to(device),
                **masks,
                position_ids=positions,
                use_cache=True,
                output_hidden_states=bool(self.hidden_layers),
                logits_to_keep=logits_rows.to(device) if logits_rows is not None else 0,
            )
        finally:
            self.cache.packing = None
        dense = (lambda t: t) if packing is None else packing.unpack  # noqa: E731
        hidden = None
        if self.hidden_layers:  # each layer's on its own device under a device_map: gathered on the input's
            rows = slice(None) if logits_rows is None or all_hidden else logits_rows.to(device)
            hidden = torch.stack([dense(out.hidden_states[i][:, rows].to(device)) for i in self.hidden_layers], dim=2)
        return LMOutput(dense(out.logits.to(device)), hidden)
