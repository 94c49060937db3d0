"""arctic-inference's suffix cache drafting for our loop: the compare row `arctic_suffix`.

SuffixDecoding's own implementation (Snowflake's C++ suffix trees) runs in its own environment
(measurement/peers/arctic_worker.py); this proposer hands it each row's prompt, then each step the row's newly
committed tokens and its context, and turns the tree it answers (token ids, parents, path probabilities) into our
point tree, verified by the same verifier as every method. Rows of a run share one worker, so the global cache of
earlier responses grows over the run as ours does. The worker's round trip (a JSON line per row per step) is
counted in the row's draft time.
"""

from __future__ import annotations

from itertools import count

import torch

from framework.core.path_tree import tree_from_paths
from framework.core.proposer import DecodeState
from framework.core.tree import CandidateTree
from measurement.peers.engine import PeerWorker
from proposers.common.token_history import TextProposer


def leaf_paths(token_ids: list[int], parents: list[int], probs: list[float]) -> list[tuple[list[int], float]]:
    """A tree as arctic answers it (parent index per node, -1 under the context's end) -> its leaves' token paths
    and path probabilities, as our path-tree builder takes them."""
    paths: list[list[int]] = []
    for token, parent in zip(token_ids, parents):
        if parent >= len(paths):
            raise ValueError(f"arctic's tree lists node {len(paths)} before its parent {parent}")
        paths.append((paths[parent] if parent >= 0 else []) + [token])
    inner = {p for p in parents if p >= 0}
    return [(paths[i], probs[i]) for i in range(len(paths)) if i not in inner]


class ArcticSuffixProposer(TextProposer):
    def __init__(self, worker: PeerWorker, max_budget: int = 32, max_spec_factor: float = 1.0, min_prob: float = 0.1,
                 max_match: int = 16, cache: str = ""):
        """Settings as ours (conf/proposer/suffix.yaml): the most nodes, nodes per matched token, the least path
        probability, the longest context handed over for the match; cache: which of the worker's caches (opened
        by name) its requests live in."""
        super().__init__()
        self.worker, self.cache, self.max_budget, self.max_spec_factor = worker, cache, max_budget, max_spec_factor
        self.min_prob, self.max_match = min_prob, max_match
        self.requests: list[str] = []
        self.sent: list[int] = []  # per row: its tokens the worker has (prompt and responses)

    _ids = count()

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        super().prefill(input_ids, target)
        self._restart()

    def select(self, rows: torch.Tensor) -> None:
        """The kept rows start requests of their own holding their text so far (the ended requests' responses stay
        in the worker's global cache)."""
        super().select(rows)
        self._restart()

    def _restart(self) -> None:
        self.close()
        self.requests = [f"r{next(self._ids)}" for _ in range(self.history.lengths.shape[0])]
        for b, req in enumerate(self.requests):
            self.worker.ask({"op": "start", "cache": self.cache, "req": req, "prompt": self.history.row(b)})
        self.sent = self.history.lengths.tolist()

    def propose(self, state: DecodeState) -> CandidateTree:
        if not state.plan.drafts:
            return self.plain_step(state.root)
        tokens, lengths = self.history.contexts(state.root)
        rows = []
        for b, req in enumerate(self.requests):
            context = tokens[b, : int(lengths[b])].tolist()
            committed = context[:-1]  # the root has no continuation yet
            draft = self.worker.ask({"op": "speculate", "cache": self.cache, "req": req,
                                     "response": committed[self.sent[b]:],
                                     "context": context[-self.max_match:], "max_spec_tokens": self.max_budget,
                                     "max_spec_factor": self.max_spec_factor, "min_token_prob": self.min_prob})
            self.sent[b] = len(committed)
            rows.append(leaf_paths(draft["token_ids"], draft["parents"], draft["probs"]))
        return tree_from_paths(rows, self.max_budget, state.root.device, depth=state.plan.depth)

    def close(self) -> None:
        """End the open requests (their responses stay in the worker's global cache)."""
        for req in self.requests:
            self.worker.ask({"op": "stop", "cache": self.cache, "req": req})
        self.requests = []
