"""The depth schedule as a policy: how deep to draft next, from how much of the last draft was accepted
(transformers' "heuristic" num_assistant_tokens schedule), for any proposer.

After a step whose every drafting row accepted all the levels it was offered, the next may draft two levels deeper;
otherwise one level shallower; always within [1, max_depth], starting at first_depth each generation. The cap of step
t is a function of steps before t only, fixed before any of step t's coins are drawn: given the past, the tree is a
constant and the verifier's law for that step is exact, whatever the depth. The cap reads every row's acceptance, so
a batch drafts one depth (a large batch mostly drafts shallow). A step that drafted nothing (a plain step, or a
proposer that found no candidate) teaches nothing and leaves the depth as it was.

The wrapped policy (`inner`; None: speculation as configured) still plans, trims and observes; the schedule only
lowers its depth. A proposer drafts at most its own `depth` levels: give it room up to max_depth.
"""

from __future__ import annotations

from framework.control.capped import Capped
from framework.core.policy import Policy
from framework.core.tree import CandidateTree


class AdaptiveDepth(Capped):
    def __init__(self, max_depth: int = 8, first_depth: int = 4, inner: Policy | None = None):
        """max_depth: the deepest the schedule lets a step draft; first_depth: its depth at a generation's start."""
        if not 1 <= first_depth <= max_depth:
            raise ValueError(f"need 1 <= first_depth <= max_depth, got first_depth {first_depth}, "
                             f"max_depth {max_depth}")
        super().__init__(inner)
        self.max_depth, self.first_depth = max_depth, first_depth
        self.depth = first_depth  # the most levels the next step may draft

    def cap(self) -> int:
        return self.depth

    def start(self, target, batch_size: int) -> None:
        self.depth = self.first_depth
        super().start(target, batch_size)

    def observe(self, tree: CandidateTree, result, step) -> None:
        offered = step.drafted.to(result.num_accepted.device)  # [B] the depth of the tree each row was offered
        if bool((offered > 0).any()):  # a row kept from drafting (offered 0) accepted all of its nothing
            if bool((result.num_accepted >= offered).all()):
                self.depth = min(self.max_depth, self.depth + 2)
            else:
                self.depth = max(1, self.depth - 1)
        super().observe(tree, result, step)
