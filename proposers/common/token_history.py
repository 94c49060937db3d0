"""Each row's committed tokens, for proposers that search the text itself (n-grams, retrieval).

Rows are Python lists: the prompt, then every emitted token. The root of a step (the last
emitted token) joins its row at commit, with the tokens accepted after it.
"""

from __future__ import annotations

import torch

from framework.core.tree import CandidateTree


class TokenHistory:
    def __init__(self):
        self.rows: list[list[int]] = []
        self.root: list[int] = []  # the root each row's last tree was proposed after

    def prefill(self, input_ids: torch.Tensor) -> None:
        self.rows = [list(row) for row in input_ids.tolist()]

    def select(self, rows: torch.Tensor) -> None:
        """Keep the rows `rows` [B'] (each a copy of its own)."""
        keep = rows.tolist()
        self.rows = [list(self.rows[i]) for i in keep]
        self.root = [self.root[i] for i in keep] if self.root else []

    def note_root(self, root: torch.Tensor) -> list[int]:
        """root [B]: the step's root per row, remembered for commit."""
        self.root = root.tolist()
        return self.root

    def contexts(self, root: torch.Tensor) -> list[list[int]]:
        """root [B] -> each row's whole sequence, the root last (remembered for commit)."""
        return [row + [token] for row, token in zip(self.rows, self.note_root(root))]

    def commit(self, result) -> None:
        """Append the root and the accepted tokens (result: a verifiers.Verification)."""
        accepted = result.num_accepted.tolist()
        for row, root, tokens, count in zip(self.rows, self.root, result.tokens.tolist(), accepted):
            row.append(root)
            row.extend(tokens[:count])


class TextProposer:
    """Base of the proposers that search the committed text itself (prompt lookup, lookahead, REST):
    they read no hidden state, keep a TokenHistory, and share one tree shape across rows."""

    hidden_layers = ()  # reads no target hidden state
    couples_rows = True  # B > 1 rows share one tree shape (the union of their candidates)

    def __init__(self):
        self.history = TokenHistory()

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        self.history.prefill(input_ids)

    def plain_step(self, root: torch.Tensor) -> CandidateTree:
        """No drafts this step (the policy's plan): the root is still noted, for commit."""
        self.history.note_root(root)
        return CandidateTree.empty(root.shape[0], root.device)

    def commit(self, result) -> None:
        self.history.commit(result)

    def select(self, rows: torch.Tensor) -> None:
        self.history.select(rows)
