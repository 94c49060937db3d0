"""Which attention window each layer of a Hugging Face model uses, and the masks its forward takes.

Models with sliding-window layers (Mistral, Gemma-3, GPT-OSS, Qwen with use_sliding_window) hide keys
`window` or more positions behind each query. On the registered tree attention every layer hands its own
`sliding_window` to the attention function, which reads the positions in the TreeMask. On the dense path
(any attention implementation) the model takes our 4D mask as it is, so we build the windowed one: a
model that lists `config.layer_types` takes a dict of masks keyed by layer type; one that does not uses
one window for every layer (Mistral, Mixtral, Qwen3-MoE). The mask's form is the one the model's attention
implementation reads: boolean for SDPA (and ours), additive floats for eager (which adds the mask to its scores).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framework.core.tree_mask import TreeMask
from framework.lm.tree_attention import ATTENTION_NAME

ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention")
RECURRENT_LAYER_TYPES = ("linear_attention",)  # a state, no mask (framework/lm/recurrent.py)


def sliding_window(config) -> int | None:
    """The window of the model's sliding layers (None: none; Qwen's use_sliding_window=False turns it off)."""
    window = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True) is False or not isinstance(window, int):
        return None
    if window < 1:
        raise ValueError(f"sliding_window must be >= 1, got {window}")
    return window


@dataclass(frozen=True)
class AttentionWindows:
    by_layer_type: dict[str, int | None]  # each kind of layer's window (None: full attention)
    keyed: bool  # the forward takes one mask per layer type (the model lists config.layer_types)
    recurrent: bool = False  # some layers carry a recurrent state: a forward verifies a chain, never a tree

    @classmethod
    def of(cls, config) -> AttentionWindows:
        window = sliding_window(config)
        types = getattr(config, "layer_types", None)
        if not types:
            return cls({"all": window}, keyed=False)
        unknown = sorted(set(types) - set(ATTENTION_LAYER_TYPES) - set(RECURRENT_LAYER_TYPES))
        if unknown:
            raise ValueError(f"layer types {unknown} of {type(config).__name__} are not supported by the slot cache "
                             f"and tree masks (have {', '.join(ATTENTION_LAYER_TYPES + RECURRENT_LAYER_TYPES)})")
        if "sliding_attention" in types and window is None:
            raise ValueError(f"{type(config).__name__} lists sliding_attention layers but no sliding_window")
        return cls({kind: window if kind == "sliding_attention" else None for kind in set(types)}, keyed=True,
                   recurrent=any(kind in RECURRENT_LAYER_TYPES for kind in types))

    @property
    def windowed(self) -> bool:
        return any(w is not None for w in self.by_layer_type.values())

    def dense(self, mask: TreeMask, additive: torch.dtype | None = None) -> torch.Tensor | dict[str, torch.Tensor]:
        """The 4D mask(s) [B, 1, M, S] the model's forward takes for this TreeMask: boolean, or additive in that
        dtype."""
        def form(window):
            return mask.dense(window) if additive is None else mask.additive(additive, window)

        if not self.keyed:
            return form(self.by_layer_type["all"])
        return {kind: None if kind in RECURRENT_LAYER_TYPES else form(window)
                for kind, window in self.by_layer_type.items()}


BOOLEAN_MASKS = ("sdpa", ATTENTION_NAME)  # attention implementations that read a boolean 4D mask
ADDITIVE_MASKS = ("eager",)  # ones that add the mask to their scores


def dense_mask_form(model) -> torch.dtype | None:
    """None for a boolean 4D mask, else the dtype of an additive one; an implementation that takes no 4D mask
    (flash attention: a 2D padding mask; flex: a block mask) is refused by name."""
    implementation = model.config._attn_implementation
    if implementation in BOOLEAN_MASKS:
        return None
    if implementation in ADDITIVE_MASKS:
        return next(model.parameters()).dtype
    raise ValueError(f"attention implementation {implementation!r} takes no 4D tree mask: load the target with "
                     f"attn_implementation one of {', '.join(BOOLEAN_MASKS[:1] + ADDITIVE_MASKS)}, "
                     "or use a tree backend")
