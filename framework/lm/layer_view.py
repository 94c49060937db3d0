"""A view of a Hugging Face causal LM that runs a subset of its decoder layers: self-speculation's drafter.

The view is a model of the target's own class, built on the meta device from the target's config with fewer
layers, whose every module is the target's (embedding, the chosen decoder layers, final norm, rotary, head): no
weight is copied, so the view costs no memory and always drafts with the target's current weights. Each layer
keeps its index in the target, so its KV lands at that index of whatever cache the view is given (a cache of
its own leaves the skipped indices empty). Early exit is layers 0..E-1; layer skipping is every layer but a set.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
from torch import nn


def decoder_stack(model) -> nn.Module:
    """The module that holds `layers` (the decoder stack), or a ValueError naming what this model lacks."""
    stack = getattr(model, "model", None)
    if stack is None or not isinstance(getattr(stack, "layers", None), nn.ModuleList):
        raise ValueError(f"{type(model).__name__} keeps no decoder stack at `model.layers`: self-speculation "
                         "(early_exit, layer_skip) reads the layers of Llama-style stacks")
    return stack


def layer_subset(model, layers: Sequence[int]):
    """A model of `model`'s class that runs `layers` (indices into its stack, ascending) and shares every module."""
    stack = decoder_stack(model)
    total = len(stack.layers)
    layers = list(layers)
    missing = [i for i in layers if not 0 <= i < total]
    if missing:
        raise ValueError(f"layers {missing} are not layers of this {total}-layer model (it has 0..{total - 1})")
    if not layers:
        raise ValueError("a view of no layers drafts from the embedding alone: keep at least one layer")
    if layers != sorted(set(layers)):
        raise ValueError(f"the view's layers must be distinct and ascending, got {layers}")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = len(layers)
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = [config.layer_types[i] for i in layers]
    with torch.device("meta"):
        view = type(model)(config)
    view_stack = decoder_stack(view)
    for name, child in stack.named_children():
        setattr(view_stack, name, nn.ModuleList(stack.layers[i] for i in layers) if name == "layers" else child)
    for name, child in model.named_children():
        if child is not stack:
            setattr(view, name, child)
    left = [name for name, tensor in [*view.named_parameters(), *view.named_buffers()] if tensor.is_meta
            and not _is_meta_in(model, tensor)]
    if left:
        raise ValueError(f"{type(model).__name__} has modules the view does not share ({', '.join(left[:3])}): "
                         "self-speculation is not built for this architecture")
    view.eval()
    return view


def _is_meta_in(model, tensor: torch.Tensor) -> bool:
    """A tensor the target itself holds on meta (an offloaded layer): the view shares it as it is."""
    return any(tensor is t for t in model.parameters())
