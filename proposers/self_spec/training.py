"""A LayerSkip-style fine-tune (Elhoushi et al. 2024): the target learns to be read early, for early_exit to draft.

Each step, on the zoo trainer's batch (framework/zoo/train.py):
- layer dropout: layer l of L is left out with probability `layer_dropout * l / (L - 1)` (none for the first,
  the most for the last), the same layers for the whole batch: the forward runs a view without them
  (framework/lm/layer_view.py), so the kept layers learn to do without the dropped ones;
- early-exit loss: at `exits_per_step` exits E drawn from `exits` (E: after the first E layers, as early_exit
  drafts), the next-token cross-entropy of the target's own final norm and head on that hidden state;
- loss = final cross-entropy + `exit_weight` x the mean of the exits' (the final one keeps the model a target).
Draws come from a generator seeded with (seed, step), so a resumed run sees the same layers and exits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from framework.lm.layer_view import decoder_stack, layer_subset


@dataclass(frozen=True)
class EarlyExitObjective:
    exits: tuple[int, int] = (2, 8)  # the exits E drawn from, inclusive (1..L-1)
    exits_per_step: int = 2
    exit_weight: float = 1.0
    layer_dropout: float = 0.1  # the last layer's dropout rate; earlier layers' rise linearly from 0
    seed: int = 0

    def draw(self, num_layers: int, step: int) -> tuple[tuple[int, ...], list[int]]:
        """(the layers kept this step, the exits scored: each E's layer E-1 kept)."""
        low, high = self.exits
        if not 1 <= low <= high <= num_layers - 1:
            raise ValueError(f"exits {self.exits} must lie in 1..{num_layers - 1} for this {num_layers}-layer target")
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        rates = torch.tensor([self.layer_dropout * layer / max(num_layers - 1, 1) for layer in range(num_layers)])
        kept = tuple(int(layer) for layer in torch.nonzero(torch.rand(num_layers, generator=g) >= rates).flatten())
        candidates = [E for E in range(low, high + 1) if E - 1 in kept and E - 1 != kept[-1]]
        order = torch.randperm(len(candidates), generator=g)[: self.exits_per_step]
        return kept, sorted(candidates[int(i)] for i in order)

    def __call__(self, model, blocks: torch.Tensor, step: int, bf16: bool) -> torch.Tensor:
        """blocks [B, T] -> the step's loss (scalar)."""
        num_layers = len(decoder_stack(model).layers)
        kept, exits = self.draw(num_layers, step)
        net = model if len(kept) == num_layers else layer_subset(model, kept)
        labels = blocks[:, 1:].flatten()  # [B * (T - 1)]
        with torch.autocast(blocks.device.type, dtype=torch.bfloat16, enabled=bf16):
            out = net(input_ids=blocks, output_hidden_states=True, use_cache=False)
            loss = F.cross_entropy(out.logits[:, :-1].float().flatten(0, 1), labels)
            if exits:
                stack = decoder_stack(net)
                early = [F.cross_entropy(net.lm_head(stack.norm(out.hidden_states[kept.index(E - 1) + 1]))[:, :-1]
                                         .float().flatten(0, 1), labels) for E in exits]
                loss = loss + self.exit_weight * torch.stack(early).mean()
        return loss
