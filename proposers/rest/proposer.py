"""REST (retrieval-based speculative decoding): candidates from what followed the context in a corpus.

Per row, the longest suffix of the committed text (the root included; max_context tokens, then
shorter, down to min_context) is found in the datastore's suffix array; up to max_matches of its
occurrences are read and the up-to-`depth` tokens after each are counted into a trie, and the
`budget` most frequent nodes make the tree (framework/path_tree). No match, or a context shorter
than min_context, gives an empty tree: a plain step. Chosen by value from a fixed corpus, never
from a coin: kind `point`, exact through the point rule.
"""

from __future__ import annotations

import torch

from framework.core.path_tree import tree_from_paths
from framework.core.proposer import DecodeState
from framework.core.renamed import renamed
from framework.core.tree import CandidateTree
from proposers.common.token_history import TextProposer
from proposers.rest.datastore import Datastore, DatastoreSource


class RestProposer(TextProposer):
    @renamed(num_tokens="depth")  # one name for the levels drafted, in every proposer
    def __init__(self, datastore: Datastore | DatastoreSource, max_context: int = 16, min_context: int = 1,
                 depth: int = 8, max_matches: int = 256, budget: int = 32):
        """datastore: token ids with their suffix array, or a DatastoreSource built with the target's
        tokenizer at prefill; depth: the longest candidate path; max_matches: occurrences read
        per step; budget: the most nodes in the tree."""
        super().__init__()
        if min_context < 1:
            raise ValueError(f"min_context must be >= 1, got {min_context}")
        if max_context < min_context:
            raise ValueError(f"min_context ({min_context}) exceeds max_context ({max_context})")
        for name, value in (("depth", depth), ("max_matches", max_matches), ("budget", budget)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not callable(getattr(datastore, "for_model", None)):
            raise ValueError(f"datastore must be a Datastore or a DatastoreSource, got {type(datastore).__name__}")
        self.datastore, self.store = datastore, None
        self.max_context, self.min_context, self.depth = max_context, min_context, depth
        self.max_matches, self.budget = max_matches, budget

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        self.store = self.datastore.for_model(target.model)  # checks tokenizer and vocabulary
        super().prefill(input_ids, target)

    def propose(self, state: DecodeState) -> CandidateTree:
        if not state.plan.drafts:
            return self.plain_step(state.root)
        tokens, lengths = self.history.contexts(state.root)
        paths = self.store.batched_continuations(tokens, lengths, self.depth, self.max_matches, self.max_context,
                                                 self.min_context)
        return tree_from_paths(paths, self.budget, state.root.device, depth=state.plan.depth)
