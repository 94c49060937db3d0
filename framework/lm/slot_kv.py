"""A KV cache whose layers write into preallocated buffers instead of re-concatenating.

transformers' DynamicLayer concatenates the whole past with the new slots at every forward (a
copy of the cache per layer per step: ~20% of a decoding forward of the zoo target on CPU). A
SlotLayer keeps keys/values as views of a buffer with spare capacity: a forward writes its new
slots after the used ones, and SlotCache.keep moves the accepted slots in place and shortens
the view. Capacity grows geometrically, so a generation reallocates O(log length) times.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from framework.lm.packing import Packing
from framework.lm.recurrent import is_recurrent

MIN_CAPACITY = 64


class SlotLayer(DynamicLayer):
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.key_buffer = key_states.new_empty(*key_states.shape[:2], 0, key_states.shape[3])  # [B, H, C, D]
        self.value_buffer = value_states.new_empty(*value_states.shape[:2], 0, value_states.shape[3])
        self.used = 0
        self.is_initialized = True
        self._view()

    def _view(self) -> None:
        self.keys, self.values = self.key_buffer[:, :, : self.used], self.value_buffer[:, :, : self.used]

    def reserve(self, slots: int) -> None:
        """Make room for `slots` slots in all (the used ones are kept)."""
        capacity = self.key_buffer.shape[2]
        if slots <= capacity:
            return
        capacity = max(slots, 2 * capacity, MIN_CAPACITY)
        for name in ("key_buffer", "value_buffer"):
            old = getattr(self, name)
            new = old.new_empty(*old.shape[:2], capacity, old.shape[3])
            new[:, :, : self.used] = old[:, :, : self.used]
            setattr(self, name, new)

    def write(self, start: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Put keys/values [B, H, M, D] at slots start.. and make start + M the used length."""
        end = start + keys.shape[2]
        self.reserve(end)
        self.key_buffer[:, :, start:end] = keys
        self.value_buffer[:, :, start:end] = values
        self.used = end
        self._view()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.write(self.used, key_states, value_states)
        return self.keys, self.values

    def truncate(self, slots: int) -> None:
        if slots == self.used:
            return
        self.used = slots
        self._view()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of slots to remove, got {tokens_to_remove}")
        if self.is_initialized:
            self.truncate(max(0, self.used + tokens_to_remove))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self.key_buffer = self.key_buffer.repeat_interleave(repeats, dim=0)
            self.value_buffer = self.value_buffer.repeat_interleave(repeats, dim=0)
            self._view()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            indices = indices.to(self.key_buffer.device)
            self.key_buffer, self.value_buffer = self.key_buffer[indices], self.value_buffer[indices]
            self._view()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx.to(self.device))


class SlotKVCache(DynamicCache):
    """A DynamicCache (every model accepts one) whose attention layers are SlotLayers. Given the config of a model
    with recurrent layers (framework/lm/recurrent.py), those keep transformers' own state layers."""

    def __init__(self, config=None):
        self.packing: Packing | None = None  # set for the span of a packed forward (framework/lm/packing.py)
        if config is None:
            super().__init__()
            self.layer_class_to_replicate = SlotLayer
            return
        super().__init__(config=config)  # one layer of each layer type's kind
        self.layers = [layer if is_recurrent(layer) else SlotLayer() for layer in self.layers]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """A packed forward's new keys and values [1, H, T, D] go to their rows' slots ([B, H, M, D])."""
        if self.packing is not None:
            key_states, value_states = self.packing.unpack_heads(key_states), self.packing.unpack_heads(value_states)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    @property
    def attention_layers(self) -> list[SlotLayer]:
        return [layer for layer in self.layers if not is_recurrent(layer)]

    @property
    def recurrent_layers(self) -> list:
        return [layer for layer in self.layers if is_recurrent(layer)]


def joined_layer(first: SlotLayer | None, first_rows: int, second: SlotLayer | None, second_rows: int,
                 slots: int) -> SlotLayer:
    """One layer holding `first`'s rows then `second`'s, `slots` wide (None, or a layer never written: rows with no
    slot written yet). Past each side's slots: zeros, holes its valid mask hides (zeros, so that a masked weight of
    0 never meets a NaN of uninitialised memory)."""
    sides = [(layer, rows) for layer, rows in ((first, first_rows), (second, second_rows))]
    written = [layer for layer, _ in sides if layer is not None and layer.is_initialized]
    out = SlotLayer()
    if not written:
        return out
    template = written[0]
    buffers = []
    for name in ("key_buffer", "value_buffer"):
        like = getattr(template, name)
        joined = like.new_zeros(first_rows + second_rows, like.shape[1], max(slots, MIN_CAPACITY), like.shape[3])
        start = 0
        for layer, rows in sides:
            if layer is not None and layer.is_initialized:
                joined[start:start + rows, :, : layer.used] = getattr(layer, name)[:, :, : layer.used].to(joined.device)
            start += rows
        buffers.append(joined)
    out.device, out.is_initialized, out.used = template.device, True, slots
    out.key_buffer, out.value_buffer = buffers
    out._view()
    return out
