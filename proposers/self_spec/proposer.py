"""Self-speculation: the target drafts with a view of its own layers (framework/lm/layer_view.py).

`early_exit` (LayerSkip, transformers' `assistant_early_exit`) drafts with layers 0..E-1, then the final norm and
head; `layer_skip` (SWIFT, KnapSpec) with every layer but a skip set. The view is built from the target at the
first prefill, so the config names no second model and no weight is copied; it then drafts as a draft model does
(proposers/draft_model.py: levels, laws, its own KV cache of the view's layers). `auto` chooses E or the skip set
from the file `python -m experiments.search_layers` saved beside the target, or else from measurements on the first
prompt (proposers/self_spec/choose.py), once per target: the choice never reads a coin, so every law stays exact.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from typing import Sequence

import torch

from framework.core.prompts import is_ragged, prompt_lengths
from framework.core.renamed import renamed
from framework.lm.layer_view import decoder_stack, layer_subset
from proposers.draft_model import DraftModelProposer, adaptive_depth_moved
from proposers.self_spec.choose import Calibration, best_exit, best_skip_set
from proposers.self_spec.saved import saved_layers

log = logging.getLogger(__name__)
_chosen: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target model -> {setting: layers}
_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target model -> {layers: its view} (building one
# takes ~30 ms, a request's proposer is fresh, and a view holds no state of its own: every module is the target's)


class SelfSpeculationProposer(DraftModelProposer):
    """A draft model that is a view of the target. Subclasses say which layers the view runs."""

    @renamed(gamma="depth")  # one name for the levels drafted, in every proposer
    @adaptive_depth_moved  # refused now, not at the first prefill that builds the view
    def __init__(self, depth: int = 4, **draft_settings):
        if depth < 1:
            raise ValueError(f"need depth >= 1, got {depth}")
        self.depth, self.settings = depth, draft_settings
        self.view_of = None  # the target model the current view was built from
        self.layers: tuple[int, ...] = ()
        self.couples_rows = draft_settings.get("stop_below", 0.0) > 0

    def view_layers(self, model, prompt: torch.Tensor) -> tuple[int, ...]:
        raise NotImplementedError

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        model = target.model
        if self.view_of is not model:
            if any(t not in ("full_attention", "sliding_attention")
                   for t in getattr(getattr(model, "config", None), "layer_types", None) or ()):
                raise ValueError("this target has recurrent layers: a view of part of it would draft with its own "
                                 "recurrent state, which no draft rolls back yet (self-speculation is not built for "
                                 "hybrid targets)")
            lengths = prompt_lengths(input_ids)  # calibrated on the prompts (on the longest, when they differ)
            longest = int(lengths.argmax())
            calibration = (input_ids if not is_ragged(input_ids)
                           else input_ids[longest:longest + 1, : int(lengths[longest])])
            self.layers = self.view_layers(model, calibration)
            backend = target.tree_backend
            views = _views.setdefault(model, {})
            if self.layers not in views:
                views[self.layers] = layer_subset(model, self.layers)
            super().__init__(views[self.layers], self.depth, sampling=None, backend=backend,
                             **self.settings)
            self.view_of = model
        super().prefill(input_ids, target)

    def join(self, other: SelfSpeculationProposer) -> None:
        if other.layers != self.layers:
            raise ValueError(f"newcomers drafted with layers {list(other.layers)}, this batch with {list(self.layers)}")
        super().join(other)

    def chosen(self, model, key: str, choose) -> tuple[int, ...]:
        """The choice saved beside the target (proposers/self_spec/saved.py), else one measured on the first prompt;
        made once per target model and setting."""
        remembered = _chosen.setdefault(model, {})
        if key not in remembered:
            layers = saved = saved_layers(model, key)
            if layers is None:
                measured = choose()
                if measured.speed < 1.0:
                    warnings.warn(f"self-speculation ({key}): the best view measured on this target, "
                                  f"{measured.describe()}: expect plain decoding to be faster", stacklevel=2)
                layers = measured.layers
            log.info("self-speculation %s drafts with layers %s of %d (%s)", key, list(layers),
                     len(decoder_stack(model).layers), "saved beside the target" if saved else "measured")
            remembered[key] = layers
        return remembered[key]


class EarlyExitProposer(SelfSpeculationProposer):
    @renamed(gamma="depth")
    @adaptive_depth_moved
    def __init__(self, exit_layer: int | str = "auto", depth: int = 4, **draft_settings):
        """exit_layer: E, the view runs the target's layers 0..E-1 (1..L-1), or "auto" (measured)."""
        if exit_layer != "auto" and (isinstance(exit_layer, bool) or not isinstance(exit_layer, int)):
            raise ValueError(f"exit_layer must be a layer count or 'auto', got {exit_layer!r}")
        super().__init__(depth, **draft_settings)
        self.exit_layer = exit_layer

    def view_layers(self, model, prompt: torch.Tensor) -> tuple[int, ...]:
        total = len(decoder_stack(model).layers)
        if self.exit_layer == "auto":
            return self.chosen(model, f"exit/{self.depth}", lambda: best_exit(Calibration(model, prompt, self.depth)))
        if not 1 <= self.exit_layer <= total - 1:
            raise ValueError(f"exit_layer {self.exit_layer} is outside 1..{total - 1} for this {total}-layer target "
                             "(E layers draft; E = L would be the target itself)")
        return tuple(range(self.exit_layer))

    def exit_layer_for(self, model, prompt: torch.Tensor) -> int:
        """E for this target: the configured one, or the one `auto` measures on this prompt (remembered)."""
        return len(self.view_layers(model, prompt))


class LayerSkipProposer(SelfSpeculationProposer):
    @renamed(gamma="depth")
    @adaptive_depth_moved
    def __init__(self, skip: Sequence[int] | str = "auto", depth: int = 4, **draft_settings):
        """skip: the target's layers the view leaves out (a list of indices), or "auto" (measured)."""
        if skip != "auto" and (isinstance(skip, str) or not all(isinstance(i, int) for i in skip)):
            raise ValueError(f"skip must be a list of layer indices or 'auto', got {skip!r}")
        super().__init__(depth, **draft_settings)
        self.skip = skip if skip == "auto" else tuple(skip)

    def view_layers(self, model, prompt: torch.Tensor) -> tuple[int, ...]:
        total = len(decoder_stack(model).layers)
        if self.skip == "auto":
            return self.chosen(model, f"skip/{self.depth}",
                               lambda: best_skip_set(Calibration(model, prompt, self.depth)))
        unknown = sorted(i for i in self.skip if not 0 <= i < total)
        if unknown:
            raise ValueError(f"skip names layers {unknown} that this {total}-layer target lacks "
                             f"(it has 0..{total - 1})")
        kept = tuple(i for i in range(total) if i not in set(self.skip))
        if not kept:
            raise ValueError(f"skip names every one of the target's {total} layers: "
                             "nothing would be left to draft with")
        if len(kept) == total:
            raise ValueError("skip names no layer: the view would be the target itself (proposer=self_draft)")
        return kept
