"""The preallocated KV layers: the same attention inputs as transformers' own cache, written in place."""

import pytest
import torch
from transformers import DynamicCache

from framework.lm.models import tiny_random_model
from framework.lm.slot_cache import SlotCache
from framework.lm.slot_kv import MIN_CAPACITY, SlotKVCache, SlotLayer


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_incremental_forwards_match_dynamic_cache_past_growth(arch):
    model = tiny_random_model(arch, max_positions=512)
    tokens = torch.randint(0, 64, (2, 3 * MIN_CAPACITY))
    ours, theirs = SlotKVCache(), DynamicCache()
    with torch.no_grad():
        for start in range(0, tokens.shape[1], 37):  # chunks that cross every capacity boundary
            chunk = tokens[:, start : start + 37]
            a = model(chunk, cache=ours, use_cache=True).logits
            b = model(chunk, cache=theirs, use_cache=True).logits
            torch.testing.assert_close(a, b)
    layer = ours.layers[0]
    assert isinstance(layer, SlotLayer) and layer.keys.shape == theirs.layers[0].keys.shape
    assert layer.key_buffer.shape[2] >= tokens.shape[1]  # grown, not re-concatenated


def _filled(batch=2, slots=6):
    layer = SlotLayer()
    keys = torch.arange(batch * slots, dtype=torch.float32).view(batch, 1, slots, 1)
    layer.update(keys, -keys)
    return layer, keys


def test_write_truncate_and_crop_keep_the_buffer():
    layer, keys = _filled()
    buffer = layer.key_buffer
    layer.truncate(4)
    layer.write(4, keys[:, :, :1] + 100, keys[:, :, :1])
    assert layer.keys.shape[2] == 5 and layer.key_buffer is buffer  # in place: no new allocation
    torch.testing.assert_close(layer.keys[:, :, 4], keys[:, :, 0] + 100)
    layer.crop(-2)
    assert layer.keys.shape[2] == 3
    with pytest.raises(ValueError, match="negative"):
        layer.crop(2)


def test_keep_moves_the_accepted_slots_per_row():
    cache = SlotCache()
    cache.reset(2, torch.device("cpu"))
    layer, keys = _filled()
    cache.cache.layers.append(layer)
    cache.keep(torch.tensor([[0, 3, 5], [0, 1, 2]]), torch.tensor([3, 2]))  # row 0 moves slots, row 1 keeps its own
    assert layer.keys.shape[2] == 3
    torch.testing.assert_close(layer.keys[0, 0, :, 0], keys[0, 0, [0, 3, 5], 0])
    torch.testing.assert_close(layer.values[1, 0, :, 0], -keys[1, 0, [0, 1, 2], 0])
    assert cache.valid.tolist() == [[True, True, True], [True, True, False]]


def test_keep_commits_no_slot_past_every_rows_count():
    """A path padded beyond what any row accepted (a rejected deepest level) must not become holes
    that every later forward attends over: the committed region grows by the largest count."""
    cache = SlotCache()
    cache.reset(2, torch.device("cpu"))
    layer, keys = _filled()
    cache.cache.layers.append(layer)
    cache.keep(torch.tensor([[0, 2, 4, -1], [0, 1, -1, -1]]), torch.tensor([2, 1]))
    assert cache.committed_slots == 2 and layer.keys.shape[2] == 2
    assert cache.valid.tolist() == [[True, True], [True, False]]
    torch.testing.assert_close(layer.keys[0, 0, :, 0], keys[0, 0, [0, 2], 0])
    with pytest.raises(ValueError, match="only 4 were listed"):
        cache.keep(torch.zeros(2, 4, dtype=torch.long), torch.tensor([5, 1]))

def test_batch_select_keeps_the_buffer_behind_the_views():
    layer, keys = _filled(batch=3)
    layer.batch_select_indices(torch.tensor([2, 0]))
    layer.update(keys[:2, :, :1] + 100, keys[:2, :, :1])  # writes must land in the selected rows' buffer
    torch.testing.assert_close(layer.keys[:, 0, :6, 0], keys[[2, 0], 0, :, 0])
    torch.testing.assert_close(layer.keys[:, 0, 6, 0], keys[:2, 0, 0, 0] + 100)


def test_batch_repeat_interleave_copies_rows():
    layer, keys = _filled(batch=1)
    layer.batch_repeat_interleave(3)
    assert layer.keys.shape[0] == 3 and bool((layer.keys == keys).all())
