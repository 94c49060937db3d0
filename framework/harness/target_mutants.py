"""Bugs planted in the target adapter, caught by the exact law through the real loop (DESIGN section 7).

Each mutant is an HFTarget with one part replaced by a realistic mistake, and a witness: a small
exact loop case on the vocabulary-3 toy target that the clean HFTarget passes and the mutant must
fail. `python -m experiments.mutants` runs them after the verifier's mutants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from framework.harness.exact import compare
from framework.harness.real import exact_loop_law, teacher_forced_law
from framework.models import tiny_random_model
from framework.sampling import SamplingConfig
from framework.target import HFTarget, TargetOutput


class WrongPositions(HFTarget):
    """Tree rows numbered as a chain (past + row index) instead of past + depth."""

    def forward_tree(self, tree, side=None):
        tokens = torch.cat([self.root[:, None], tree.tokens], dim=1)
        out = self.lm.forward(tokens, torch.arange(tree.num_nodes + 1), tree.ancestor_mask())
        return TargetOutput(out.logits, out.hidden)


class CropInsteadOfGather(HFTarget):
    """Commit keeps the first accepted-count tree slots (a scalar rewind) instead of the path."""

    def commit(self, result):
        slots = torch.arange(result.path.shape[1] + 1).expand(result.path.shape[0], -1)
        self.lm.keep(slots, result.num_accepted + 1)


class SideRowsKeptAtCommit(HFTarget):
    """The side rows' KV (lookahead's window) is committed after the accepted path, as if it were
    text: later tokens attend to guesses at positions that are not theirs."""

    def forward_tree(self, tree, side=None):
        self.side_count, self.tree_rows = (0 if side is None else side.num_rows), tree.num_nodes + 1
        return super().forward_tree(tree, side)

    def commit(self, result) -> None:
        B, S = result.path.shape[0], self.side_count
        slots = torch.zeros(B, result.path.shape[1] + 1 + S, dtype=torch.long)
        for b, count in enumerate(result.num_accepted.tolist()):
            row = [0] + [p + 1 for p in result.path[b, :count].tolist()] + list(range(self.tree_rows, self.tree_rows + S))
            slots[b, : len(row)] = torch.tensor(row)
        self.lm.keep(slots, result.num_accepted + 1 + S)


TOY = dict(vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)


def loop_tv(proposer_factory: Callable, target_factory=HFTarget, depth: int = 3, prompt=(1, 2, 0)) -> float:
    """TV between the real loop's exact law of the first `depth` tokens and the toy target's (T = 1)."""
    target, prompt = tiny_random_model("llama", seed=0, **TOY), torch.tensor([prompt])
    spec = exact_loop_law(target, proposer_factory, prompt, depth, SamplingConfig(), target_factory=target_factory)
    return compare(spec, teacher_forced_law(target, prompt, depth, SamplingConfig())).tv


def draft_tree_witness(target_factory) -> float:
    """Three point children of the root, four tokens (a corrupt commit shows from the second step on)."""
    from proposers import DraftModelProposer

    draft = tiny_random_model("llama", seed=1, **TOY)
    return loop_tv(lambda: DraftModelProposer(draft, gamma=1, branching=3, depth=1, kind="point"), target_factory, depth=4)


def lookahead_witness(target_factory) -> float:
    from proposers import LookaheadProposer

    return loop_tv(lambda: LookaheadProposer(window=2, ngram=2, guesses=2), target_factory, prompt=(1, 2, 0, 1))


@dataclass(frozen=True)
class TargetMutant:
    name: str
    bug: str
    target: type[HFTarget]
    witness: Callable[[type], float]  # target factory -> TV of the exact loop law; the clean HFTarget gives ~0


def target_mutants() -> list[TargetMutant]:
    m = TargetMutant
    return [
        m("wrong-positions", "tree rows numbered past + row index instead of past + depth", WrongPositions, draft_tree_witness),
        m("kv-crop-not-gather", "commit keeps the first slots (a scalar rewind) instead of the accepted path",
          CropInsteadOfGather, draft_tree_witness),
        m("side-row-kv-kept", "the side rows' KV (lookahead's window) committed after the accepted path",
          SideRowsKeptAtCommit, lookahead_witness),
    ]
