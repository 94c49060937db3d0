"""Each row's committed tokens, for proposers that search the text itself (n-grams, retrieval).

One tensor for the batch: tokens [B, capacity], each row left-aligned, -1 after its `lengths[b]`
tokens (the prompt, then every emitted token). The root of a step (the last emitted token) is written
after the row when noted; at commit it stays, with the tokens accepted after it. Every operation works
on all rows at once.
"""

from __future__ import annotations

import torch

from framework.core.prompts import prompt_lengths
from framework.core.rows import cat_rows
from framework.core.tree import CandidateTree


class TokenHistory:
    def __init__(self):
        self.tokens = torch.zeros(0, 0, dtype=torch.long)  # [B, capacity]
        self.lengths = torch.zeros(0, dtype=torch.long)  # [B] committed tokens per row
        self.root: torch.Tensor | None = None  # [B] the root each row's last tree was proposed after

    def prefill(self, input_ids: torch.Tensor) -> None:
        B, L = input_ids.shape
        self.tokens = torch.full((B, 2 * L + 16), -1, dtype=torch.long)
        self.tokens[:, :L] = input_ids.cpu()
        self.lengths = prompt_lengths(input_ids).cpu()  # -1 already pads after a shorter prompt
        self.root = None

    def row(self, b: int) -> list[int]:
        """Row b's committed tokens."""
        return self.tokens[b, : int(self.lengths[b])].tolist()

    def select(self, rows: torch.Tensor) -> None:
        """Keep the rows `rows` [B'] (each a copy of its own)."""
        rows = rows.cpu()
        self.tokens, self.lengths = self.tokens[rows], self.lengths[rows]
        self.root = None if self.root is None else self.root[rows]

    def join(self, other: TokenHistory) -> None:
        """Append other's rows after these (-1 past each row's tokens, as always)."""
        self.tokens = cat_rows(self.tokens, other.tokens, fill=-1)
        self.lengths = torch.cat([self.lengths, other.lengths])
        self.root = None  # noted again at the next propose

    def reserve(self, more: int) -> None:
        """Room for `more` tokens after the longest row (the capacity doubles as it runs out)."""
        needed = int(self.lengths.max()) + more if self.lengths.numel() else more
        if needed > self.tokens.shape[1]:
            grown = torch.full((self.tokens.shape[0], max(needed, 2 * self.tokens.shape[1])), -1, dtype=torch.long)
            grown[:, : self.tokens.shape[1]] = self.tokens
            self.tokens = grown

    def note_root(self, root: torch.Tensor) -> torch.Tensor:
        """root [B]: the step's root per row, written after each row and remembered for commit."""
        self.root = root.cpu()
        self.reserve(1)
        self.tokens[torch.arange(self.root.shape[0]), self.lengths] = self.root
        return self.root

    def contexts(self, root: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """root [B] -> (tokens [B, capacity], lengths [B]): each row's whole sequence, the root last."""
        self.note_root(root)
        return self.tokens, self.lengths + 1

    def commit(self, result) -> None:
        """Append the root and the accepted tokens (result: a verifiers.Verification)."""
        if result.path.shape[1] == 0:  # a step with no tree: the root alone, already written by note_root
            self.lengths = self.lengths + 1
            return
        count = result.num_accepted.cpu() + 1  # [B] the root, then the accepted nodes
        new = torch.cat([self.root[:, None], result.tokens.cpu()], dim=1)  # [B, 1 + D + 1]
        self.reserve(new.shape[1])
        at = torch.arange(new.shape[1]) < count[:, None]  # [B, 1 + D + 1]
        rows = torch.arange(new.shape[0])[:, None].expand_as(new)
        self.tokens[rows[at], (self.lengths[:, None] + torch.arange(new.shape[1]))[at]] = new[at]
        self.lengths = self.lengths + count


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

    def join(self, other: TextProposer) -> None:
        self.history.join(other.history)
