"""Choosing what self-speculation drafts with, from measurements on the target (no training).

Both choices score a candidate view by the tokens a chain of `depth` d is expected to yield per unit of time:
    accepted(a) = (1 - a^(d+1)) / (1 - a)        (a: the view's top-1 agreement with the target)
    time = 1 + d * cost(view) / cost(target)      (cost: a measured forward of a few tokens)
The agreement is measured on calibration tokens (the first prompt the target sees) by teacher forcing: the
view's and the target's top-1 at every position. It is a proxy (greedy acceptance of one token at a time); the
choice reads only the prompt, never a coin, so the output law does not depend on it.
Early exit (LayerSkip) tries every exit E in 1..L-1; layer skipping (SWIFT/KnapSpec-like) grows the skip set
greedily, one layer a round, while the score improves.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from framework.lm.layer_view import decoder_stack, layer_subset


@dataclass(frozen=True)
class ViewScore:
    layers: tuple[int, ...]
    agreement: float  # top-1 agreement with the target on the calibration tokens
    cost: float  # a forward's time as a fraction of the target's
    speed: float  # expected tokens per target-forward time for a chain of `depth`

    def describe(self) -> str:
        below = " (below 1: slower than plain decoding by this proxy)" if self.speed < 1.0 else ""
        return (f"{len(self.layers)} layers: agreement {self.agreement:.3f}, cost {self.cost:.2f} of the target's, "
                f"score {self.speed:.3f}{below}")


def expected_tokens(agreement: float, depth: int) -> float:
    if agreement >= 1.0:
        return depth + 1.0
    return (1.0 - agreement ** (depth + 1)) / (1.0 - agreement)


def forward_seconds(model, tokens: torch.Tensor, repeats: int = 3) -> float:
    """The median time of a forward of a few tokens (dispatch-bound, as a decoding forward is)."""
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        model(input_ids=tokens, use_cache=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


class Calibration:
    """The target's top-1 on calibration tokens [B, T], and the measured cost of its forward."""

    def __init__(self, model, tokens: torch.Tensor, depth: int):
        if tokens.shape[-1] < 2:
            raise ValueError("calibrating self-speculation needs a prompt of at least 2 tokens")
        self.model, self.tokens, self.depth = model, tokens, depth
        self.total = len(decoder_stack(model).layers)
        with torch.no_grad():
            self.top1 = model(input_ids=tokens, use_cache=False).logits.argmax(-1)  # [B, T]
            self.full_cost = forward_seconds(model, tokens[:1, -4:])  # one row, as a request decodes

    @torch.no_grad()
    def score(self, layers: tuple[int, ...]) -> ViewScore:
        view = layer_subset(self.model, layers)
        agreement = float((view(input_ids=self.tokens, use_cache=False).logits.argmax(-1) == self.top1).float().mean())
        cost = forward_seconds(view, self.tokens[:1, -4:]) / self.full_cost
        speed = expected_tokens(agreement, self.depth) / (1.0 + self.depth * cost)
        return ViewScore(layers, agreement, cost, speed)


def best_exit(calibration: Calibration) -> ViewScore:
    """The exit layer E (the view runs layers 0..E-1) with the best score."""
    if calibration.total < 2:
        raise ValueError("a 1-layer target has no early exit (E must be in 1..L-1): self-speculation needs 2 layers")
    scores = [calibration.score(tuple(range(E))) for E in range(1, calibration.total)]
    return max(scores, key=lambda s: s.speed)


def best_skip_set(calibration: Calibration) -> ViewScore:
    """Grow the skip set one layer a round (the one whose skipping scores best) while the score improves. At least
    one layer is skipped (skipping none is the target itself); on stacks of 4 or more layers the first and the last
    stay (skipping them costs the most agreement in every published search)."""
    if calibration.total < 2:
        raise ValueError("a 1-layer target has no layer to skip: self-speculation needs 2 layers")
    best = None
    kept = tuple(range(calibration.total))
    while len(kept) > 1:
        droppable = kept[1:-1] if calibration.total >= 4 else kept
        if not droppable:
            break
        trial = max((calibration.score(tuple(i for i in kept if i != drop)) for drop in droppable),
                    key=lambda s: s.speed)
        if best is not None and trial.speed <= best.speed:
            break
        best, kept = trial, trial.layers
    return best
