"""A draft of another tokenizer matched on the text (SLEM: string-level exact match; transformers' universal
assisted generation): the draft continues the text greedily in its own vocabulary, unmasked, and its
continuation, spelled in the target's tokens, is a point chain. Exact at any temperature: the chain is chosen
blind to the verifier's coins, and the point rule accepts each token with the target's own p(x) (at greedy,
when it is the target's argmax). It gives up TLI's p / q gain; its reach is every draft token, not only the
shared ones.

The draft's cache keeps what it read of the committed text, each target token in its own spelling (as
proposers/cross_vocab.py reads it); the tokens it drafted are dropped at every commit and the accepted ones
read again, spelled, with the next root: the draft's and the target's tokenizations never need to line up.
"""

from __future__ import annotations

import torch

from framework.core.prompts import prompt_rows
from framework.core.proposer import DecodeState
from framework.core.renamed import renamed
from framework.core.tree import CandidateTree
from framework.core.verification import Verification
from framework.lm import tree_attention
from framework.lm.cached_lm import CachedLM
from proposers.common.ragged_read import read_ragged
from proposers.cross_vocab import VocabularyMap


class StringMatchProposer:
    hidden_layers = ()
    couples_rows = False  # every draft token spells as one target token at least: each row's chain is depth long

    @renamed(gamma="depth")  # one name for the levels drafted, in every proposer
    def __init__(self, draft_model, to_draft: VocabularyMap, to_target: VocabularyMap, depth: int = 4,
                 backend: str | None = "auto"):
        """to_draft: target tokens spelled in draft tokens (what the draft reads); to_target: draft tokens spelled in
        target tokens (what it proposes), e.g. VocabularyMap.of_folders with the two folders swapped; depth: draft
        tokens per step."""
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if to_draft.target_size != to_target.draft_size or to_draft.draft_size != to_target.target_size:
            raise ValueError("to_draft and to_target must map the same two vocabularies, in opposite directions")
        tree_attention.use_tree_attention(draft_model, backend)
        self.lm = CachedLM(draft_model, tree_backend=backend)
        if to_draft.draft_size != self.lm.vocab_size:
            raise ValueError(f"the vocabulary maps are for {to_draft.draft_size} draft tokens, "
                             f"the draft has {self.lm.vocab_size}")
        self.to_draft, self.to_target, self.depth = to_draft, to_target, depth
        self.unread: list[list[int]] = []  # per row: committed draft tokens not yet in the draft's cache
        self.drafted = False  # this step read and drafted (its drafted slots are dropped at commit)

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        if self.to_draft.target_size != target.vocab_size:
            raise ValueError(f"the vocabulary maps are for {self.to_draft.target_size} target tokens, "
                             f"the target has {target.vocab_size}")
        self.lm.reset(input_ids.shape[0])
        self.unread = [self.to_draft.spell(row) for row in prompt_rows(input_ids)]

    def propose(self, state: DecodeState) -> CandidateTree:
        B = state.root.shape[0]
        self.unread = [lead + self.to_draft.spell([t]) for lead, t in zip(self.unread, state.root.tolist())]
        depth = self.depth if state.plan.depth is None else min(self.depth, state.plan.depth)
        if self.lm.max_positions is not None:  # drafted tokens are read after the committed text, the last one not
            read = self.lm.length.cpu() + torch.tensor([len(row) for row in self.unread])
            depth = min(depth, self.lm.max_positions - int(read.max()) + 1)
        if not state.plan.drafts or depth <= 0:  # (past the draft's context: what is unread waits, unread)
            self.drafted = False
            return CandidateTree.empty(B, state.root.device)
        self.drafted = True
        logits = read_ragged(self.lm, self.unread)  # [B, V_d] after each row's last committed token
        self.unread = [[] for _ in range(B)]
        drafted = []
        for level in range(depth):  # greedy in the draft's own vocabulary; the last token is not read
            token = logits.argmax(-1)  # [B]
            drafted.append(token)
            if level + 1 < depth:
                logits = self.lm.forward(token[:, None], torch.tensor([level]),
                                         torch.ones(1, level + 1, dtype=torch.bool)).logits[:, -1]
        spelled = [self.to_target.spell(row)[:depth] for row in torch.stack(drafted, 1).tolist()]
        return CandidateTree.chain(torch.tensor(spelled, dtype=torch.long, device=state.root.device).view(B, depth))

    def commit(self, result: Verification) -> None:
        """Drop the drafted slots; the accepted tokens are read, spelled, before the next root."""
        B = result.tokens.shape[0]
        if self.drafted:
            self.lm.keep(torch.zeros(B, 0, dtype=torch.long), torch.zeros(B, dtype=torch.long))
        for b, (row, accepted) in enumerate(zip(result.tokens.tolist(), result.num_accepted.tolist())):
            self.unread[b] += self.to_draft.spell(row[:accepted])

    def join(self, other: StringMatchProposer) -> None:
        self.lm.join(other.lm)
        self.unread = self.unread + other.unread

    def select(self, rows: torch.Tensor) -> None:
        self.lm.select(rows)
        self.unread = [list(self.unread[r]) for r in rows.tolist()]
