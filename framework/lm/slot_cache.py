"""KV slots that each batch row keeps or drops: the bookkeeping under every cached model.

The cache holds committed slots, then the pending slots of the forwards since the last `keep`.
A row's committed slots are marked in `valid`, so rows may commit different numbers of tokens
(holes stay masked); a forward's positions are the row's committed length plus the input's depth.
A row's committed slots therefore hold positions 0, 1, ... in slot order (holes aside), so a committed
slot's position is the count of valid slots before it; pending slots' positions are recorded as they are
written, for the masks of sliding-window layers.
Shared by CachedLM (a whole Hugging Face model) and the EAGLE head (one decoder layer).
"""

from __future__ import annotations

import torch

from framework.core.tree_mask import TreeMask
from framework.lm import recurrent
from framework.lm.slot_kv import SlotKVCache, joined_layer


class SlotCache:
    def __init__(self):
        self.cache: SlotKVCache | None = None
        self.valid = torch.zeros(0, 0, dtype=torch.bool)  # [B, S0] committed slots in use
        self.length = torch.zeros(0, dtype=torch.long)  # [B] committed tokens = next position
        self.committed_slots = 0  # S0; slots after it are pending
        self.pending_positions = torch.zeros(0, 0, dtype=torch.long)  # [B, P] recorded by tree_mask(positions=...)

    @property
    def batch_size(self) -> int:
        return self.length.shape[0]

    def reset(self, batch_size: int, device: torch.device, config=None) -> None:
        """config: a model with recurrent layers (its cache keeps their state layers)."""
        self.cache = SlotKVCache(config)
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)
        self.length = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.committed_slots = 0
        self.pending_positions = torch.zeros(batch_size, 0, dtype=torch.long, device=device)

    def positions(self, depth: torch.Tensor) -> torch.Tensor:
        """depth [M] (or [B, M], per row) offsets from each row's committed length -> position ids [B, M]."""
        depth = depth.to(self.length.device)
        return self.length[:, None] + (depth if depth.dim() == 2 else depth[None, :])

    def tree_mask(self, pending_mask: torch.Tensor, positions: torch.Tensor | None = None) -> TreeMask:
        """pending_mask [M, P+M] (or [B, M, P+M], per row) bool: which pending and new slots each input sees.
        positions [B, M]: the inputs' position ids, given for a forward that writes them (it records them as
        pending) and whose layers need them (sliding windows); the mask then carries every slot's position."""
        pending_mask = pending_mask.to(self.valid.device)
        if positions is None:
            return TreeMask(self.valid, pending_mask)
        positions = positions.to(self.valid.device)
        committed = self.valid.long().cumsum(1) - 1  # [B, S0]
        keys = torch.cat([committed, self.pending_positions, positions], dim=1)  # [B, S0+P+M]
        self.pending_positions = torch.cat([self.pending_positions, positions], dim=1)
        return TreeMask(self.valid, pending_mask, positions, keys)

    def keep(self, slots: torch.Tensor, counts: torch.Tensor) -> None:
        """Commit, per row, the first counts[b] of the pending slots listed in slots[b]; drop the rest.

        slots [B, K] index the pending slots (0 = first slot after the committed ones).
        """
        S0, device = self.committed_slots, self.valid.device
        most = int(counts.max()) if counts.numel() else 0
        if most > slots.shape[1]:
            raise ValueError(f"asked to keep {most} slots but only {slots.shape[1]} were listed")
        # Listed slots past every row's count would only be holes that later forwards attend over.
        slots = slots[:, :most]
        B, K = slots.shape
        index = (S0 + slots.clamp_min(0)).to(device)  # [B, K]
        pending = self.pending_slots()
        in_place = K <= pending and bool((slots == torch.arange(K, device=slots.device)).all())  # laid out as kept
        recurrent_layers = self.cache.recurrent_layers
        if recurrent_layers:  # their state follows the forward's sequence: a row keeps a prefix of it, or nothing
            leading = slots == torch.arange(K, device=slots.device)
            if not bool((leading | (torch.arange(K, device=slots.device) >= counts.to(slots.device)[:, None])).all()):
                raise ValueError("a target with recurrent layers keeps a leading run of each forward's tokens "
                                 "(a chain's accepted prefix): these slots are not one")
            recurrent.keep(recurrent_layers, counts, pending)
        for layer in self.cache.attention_layers:
            if not layer.is_initialized:  # an index no layer of this model writes (a view that skips layers)
                continue
            if not in_place:  # gathered first, so writing over the pending slots cannot clobber a source
                at = index.to(layer.keys.device)[:, None, :, None]  # layers may sit on several devices (device_map)
                keys, values = (t.gather(2, at.expand(-1, t.shape[1], -1, t.shape[3]))
                                for t in (layer.keys, layer.values))
                layer.write(S0, keys, values)
            layer.truncate(S0 + K)
        kept = torch.arange(K, device=device)[None, :] < counts.to(device)[:, None]  # [B, K]
        self.valid = torch.cat([self.valid, kept], dim=1)
        self.length = self.length + counts.to(device)
        self.committed_slots = S0 + K
        self.pending_positions = self.pending_positions[:, :0]

    def commit_leading(self, count: int) -> None:
        """Commit the first `count` pending slots in every row; later pending slots stay pending.
        No data moves: they already sit right after the committed ones."""
        pending = self.pending_slots()
        if not 0 <= count <= pending:
            raise ValueError(f"asked to commit {count} leading slots but {pending} are pending")
        if self.cache.recurrent_layers and count != pending:
            raise ValueError("a model with recurrent layers commits whole forwards only "
                             "(its state has moved past them)")
        kept = torch.ones(self.batch_size, count, dtype=torch.bool, device=self.valid.device)
        self.valid = torch.cat([self.valid, kept], dim=1)
        self.length = self.length + count
        self.committed_slots += count
        self.pending_positions = self.pending_positions[:, count:]

    def pending_slots(self) -> int:
        layers = [layer for layer in self.cache.attention_layers if layer.is_initialized] \
            if self.cache is not None else []
        return layers[0].used - self.committed_slots if layers else 0

    def drop_pending(self) -> None:
        """Forget every slot written since the last keep."""
        self.keep(torch.zeros(self.batch_size, 0, dtype=torch.long), torch.zeros(self.batch_size, dtype=torch.long))

    def keep_path(self, path: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """After a tree forward laid out as [root, node 0, node 1, ...]: keep the root and the
        accepted nodes (path [B, depth], node indices, -1 padded)."""
        # a plain step: its one slot stays where it is, in every row
        if path.shape[1] == 0 and self.pending_slots() == 1:
            self.commit_leading(1)
            return
        root_slot = torch.zeros(path.shape[0], 1, dtype=torch.long, device=path.device)
        self.keep(torch.cat([root_slot, path + 1], dim=1), num_accepted + 1)

    def join(self, other: SlotCache) -> None:
        """Append `other`'s rows (a cache of the same model: a batch of newcomers prefilled apart) after this one's.
        Nothing may be pending in either; the side with fewer committed slots gets holes after them."""
        if self.pending_slots() or other.pending_slots():
            raise ValueError("a cache joins another between steps only: slots are pending")
        if self.cache.recurrent_layers:
            raise ValueError("this model has recurrent layers: their state counts one length for the whole batch, so "
                             "requests of a running batch cannot be joined by others (not built for hybrid targets)")
        slots = max(self.committed_slots, other.committed_slots)
        mine, theirs = self.cache.layers, other.cache.layers
        if mine and theirs and len(mine) != len(theirs):
            raise ValueError("the caches to join hold different layers: they are not of the same model")
        count = max(len(mine), len(theirs))  # a cache no forward wrote yet has no layers
        self.cache.layers = [joined_layer(mine[i] if mine else None, self.batch_size, theirs[i] if theirs else None,
                                          other.batch_size, slots) for i in range(count)]
        pad = lambda valid: torch.cat([valid, valid.new_zeros(valid.shape[0], slots - valid.shape[1])], dim=1)  # noqa: E731
        self.valid = torch.cat([pad(self.valid), pad(other.valid).to(self.valid.device)])
        self.length = torch.cat([self.length, other.length.to(self.length.device)])
        self.committed_slots = slots
        self.pending_positions = self.pending_positions.new_zeros(self.batch_size, 0)

    def select(self, rows: torch.Tensor) -> None:
        """Keep the batch rows `rows` [B'], in that order (repeats allowed: one prefill shared by copies;
        fewer rows: requests that finished leave the batch)."""
        rows = rows.to(self.length.device)
        if self.cache is not None:
            for layer in self.cache.attention_layers:
                layer.batch_select_indices(rows.to(layer.device) if layer.is_initialized else rows)
            recurrent.select(self.cache.recurrent_layers, rows)
        self.valid, self.length = self.valid[rows], self.length[rows]
        self.pending_positions = self.pending_positions[rows]
