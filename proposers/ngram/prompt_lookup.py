"""Prompt lookup: candidates copied from where the recent tokens occurred before.

The last n tokens (the root included; n from max_ngram down to min_ngram) are looked up in the
prompt and the generated text; what followed each earlier occurrence is a candidate path. Several
matches make one tree, shared prefixes merged, a longer match weighing more (framework/path_tree).
No match gives an empty tree: a plain step. Chosen by value from the committed text, never from a
coin: kind `point`, exact through the point rule.
"""

from __future__ import annotations

from framework.core.path_tree import tree_from_paths
from framework.core.proposer import DecodeState
from framework.core.renamed import renamed
from framework.core.tree import CandidateTree
from proposers.common.token_history import TextProposer
from proposers.ngram.match import batched_continuations, check_ngram_range


class PromptLookupProposer(TextProposer):
    @renamed(num_tokens="depth")  # one name for the levels drafted, in every proposer
    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, depth: int = 10, max_matches: int = 4,
                 budget: int = 32):
        """depth: the longest candidate path; max_matches: distinct continuations merged per step;
        budget: the most nodes in the tree."""
        super().__init__()
        check_ngram_range(min_ngram, max_ngram)
        for name, value in (("depth", depth), ("max_matches", max_matches), ("budget", budget)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.min_ngram, self.max_ngram, self.depth = min_ngram, max_ngram, depth
        self.max_matches, self.budget = max_matches, budget

    def propose(self, state: DecodeState) -> CandidateTree:
        if not state.plan.drafts:
            return self.plain_step(state.root)
        tokens, lengths = self.history.contexts(state.root)
        paths = batched_continuations(tokens, lengths, self.min_ngram, self.max_ngram, self.depth,
                                      self.max_matches)
        return tree_from_paths(paths, self.budget, state.root.device, depth=state.plan.depth)
