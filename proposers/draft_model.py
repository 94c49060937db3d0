"""An independent draft model proposes a chain or a tree (docs/design.md section 8).

Level by level: the draft reads the nodes of one depth in a single forward (each node sees the
committed past and its own ancestors), processes its logits with the sampling law, and draws
the next depth's children from that exact law q: "iid" (duplicates kept), "wor" (without
replacement, in draw order) or "point" (top-k). The deepest level is not read: its nodes have
no children to draw, so a chain of depth d costs d draft forwards, not d + 1. Commit
gathers the accepted nodes' KV. Tokens accepted without a draft slot (a deepest node, or, in a
mix, nodes of another part's tree) are read at the next step, in front of the root in the root's
forward (a forward of 2 tokens costs about what one of 1 does), when every row lacks the same
number; rows that lack different numbers get them in one forward at commit. The prompt itself is read
so, with the first root (a policy that never lets it draft never pays for it), and so is every root of a
plain step (docs/design.md section 13). Skipping a read changes no coin and no law: the deepest level's
logits drew nothing.

`stop_below` cuts the tree short where the draft is unsure: after reading a level, if no node of
it (in any row) has a draft top-1 probability (its temperature-1 softmax) of at least stop_below,
its children are still drawn (that read is paid for; like transformers' confidence stop, the first
unsure token is proposed) but become the last level. The decision reads only the draft's own
logits, so it is blind to the verifier's coins: every node still has its children drawn from its
exact law q, or none, and the output law is unchanged.

How many levels to draft from the acceptance of the steps before is a policy's to say (policy=adaptive,
framework/control/adaptive.py): the plan's depth, below this proposer's own.
"""

from __future__ import annotations

from functools import cache

import torch

from framework.core.drafting import draw_children
from framework.core.prompts import prompt_rows
from framework.core.proposer import DecodeState
from framework.core.renamed import moved, renamed
from framework.core.sampling import SamplingConfig, process_logits, seen_along_tree
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from framework.core.verification import Verification
from framework.data.token_data import tokenizer_hash
from framework.lm import tree_attention
from framework.lm.cached_lm import CachedLM, LMOutput
from framework.lm.text import tokenizer_at
from proposers.common.ragged_read import read_ragged


@cache
def fingerprint_at(checkpoint: str) -> str | None:
    tokenizer = tokenizer_at(checkpoint)
    return None if tokenizer is None else tokenizer_hash(tokenizer)


def tokenizer_fingerprint(model) -> str | None:
    """The hash of the tokenizer saved beside a model's checkpoint (once per checkpoint), or None (none saved)."""
    path = getattr(getattr(model, "config", None), "name_or_path", "") or ""
    return fingerprint_at(str(path)) if path else None


# refused by name in every proposer built on this one (the self-speculative views, a cross-vocabulary draft)
adaptive_depth_moved = moved(adaptive_depth="the policy policy=adaptive (framework.control.adaptive.AdaptiveDepth: "
                                            "max_depth, first_depth), which schedules any proposer's depth")


class DraftModelProposer:
    hidden_layers = ()  # reads no target hidden state

    @renamed(gamma="depth")  # one name for the levels drafted, in every proposer
    @adaptive_depth_moved
    def __init__(
        self,
        draft_model,
        depth: int = 4,
        branching: int = 1,
        kind: str = "iid",
        sampling: SamplingConfig | None = None,
        backend: str | None = "auto",
        stop_below: float = 0.0,
    ):
        """depth: the levels drafted: a chain's length (branching=1), else a full tree of `branching` children
        per node that deep. sampling: the draft's own law (default: the target's).
        stop_below: stop drafting deeper once a level's draft top-1 probabilities are all below it."""
        if depth < 1 or branching < 1:
            raise ValueError(f"need depth >= 1 and branching >= 1, got {depth}, {branching}")
        if not 0.0 <= stop_below <= 1.0:
            raise ValueError(f"stop_below must lie in [0, 1], got {stop_below}")
        if kind not in ("iid", "wor", "point"):
            raise ValueError(f"kind must be iid, wor or point, got {kind!r}")
        self.shape = TreeShape.chain(depth) if branching == 1 else TreeShape.full(branching, depth)
        self.kind, self.sampling, self.stop_below = kind, sampling, stop_below
        self.couples_rows = stop_below > 0  # one shape for the batch: the cut reads every row's draft
        tree_attention.use_tree_attention(draft_model, backend)
        self.lm = CachedLM(draft_model, tree_backend=backend)
        node_depth = self.shape.depth
        self.levels = self.shape.levels
        if not bool((node_depth[1:] >= node_depth[:-1]).all()):
            raise ValueError("the tree's nodes must come in level order (a cut keeps a prefix of them)")
        self.unread = self.levels[-1]  # nodes of the last proposed tree that have no draft KV yet
        self.deferred: torch.Tensor | None = None  # [B, K] accepted tokens the next root forward reads first
        self.skipped: torch.Tensor | None = None  # [B, K] the same, held over a plain step (until its commit)
        self.mask = self.shape.ancestors  # [N+1, N+1]; slot of node i is i + 1 (level order)
        self.exhausted = False  # the draft's own context is full: it drafts nothing more in this generation
        self.copies = 0  # > 0: the batch is this many copies of the draft cache's one row, not copied yet

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        self.check_vocabulary(target.vocab_size, target)
        self.lm.run_beside(target)
        self.lm.reset(input_ids.shape[0])
        self.skipped, self.exhausted, self.copies, self.deferred = None, False, 0, None
        self.queue(self.spell_prompts(prompt_rows(input_ids)))  # prompts of one length: read with the first root

    def spell_prompts(self, rows: list[list[int]]) -> list[list[int]]:
        """The prompts (the target's ids) as the draft reads them: the same ids (another vocabulary spells them,
        proposers/cross_vocab.py)."""
        return rows

    def queue(self, rows: list[list[int]]) -> None:
        """Draft tokens [B][K_b] to read before the next root (after what is deferred already): deferred when
        every row has as many, else read now, each row keeping its own."""
        if self.deferred is not None:
            rows = [lead + row for lead, row in zip(self.deferred.tolist(), rows)]
        counts = torch.tensor([len(row) for row in rows])
        K = int(counts.max()) if rows else 0
        if bool((counts == K).all()):
            self.deferred = torch.tensor(rows, dtype=torch.long, device=self.lm.device).view(len(rows), K)
            return
        self.part()
        read_ragged(self.lm, rows)
        self.deferred = None

    def check_vocabulary(self, target_vocab: int, target=None) -> None:
        if self.lm.vocab_size != target_vocab:
            raise ValueError(f"draft vocabulary ({self.lm.vocab_size}) differs from the target's ({target_vocab}): "
                             "a draft with another tokenizer drafts through proposer=cross_vocab")
        model = getattr(getattr(target, "lm", None), "model", None)
        mine, theirs = (tokenizer_fingerprint(m) for m in (self.lm.model, model))
        if mine is not None and theirs is not None and mine != theirs:
            raise ValueError(f"the draft's tokenizer ({self.lm.model.config.name_or_path}) is not the target's "
                             f"({model.config.name_or_path}), though both have {target_vocab} ids: the same id would "
                             "mean another token; a draft with another tokenizer drafts through proposer=cross_vocab")

    def propose(self, state: DecodeState) -> CandidateTree:
        if not state.plan.drafts:
            return self.plain_step(state.root)
        B = state.root.shape[0]
        room = self.draft_room(state.root)
        if room is not None and room < 1:  # the root no longer fits the draft's context (a draft of another
            self.exhausted = True          # tokenizer reads more tokens than the target): plain steps from here
        if self.exhausted:
            return CandidateTree.empty(B, state.root.device)
        cfg = self.sampling or state.sampling
        depth = len(self.levels) if state.plan.depth is None else min(len(self.levels), state.plan.depth)
        depth = depth if room is None else min(depth, room)
        N = int(self.levels[depth - 1].max()) + 1  # the nodes of the levels this step may draft (level order)
        tokens = torch.zeros(B, N, dtype=torch.long, device=state.root.device)
        # each node's draft probability along its path (row 0: the root)
        scores = torch.ones(B, N + 1, device=state.root.device)
        q = torch.empty(B, N + 1, state.seen.shape[-1],
                        dtype=torch.float64 if self.lm.dtype == torch.float64 else torch.float32,
                        device=state.root.device)
        shape = self.shape.prefix(N)
        parents = shape.parents.tolist()
        fed = 0  # pending slots written (root = slot 0)
        for level in range(depth):  # read the root, then each level that may have children
            rows = torch.tensor([0]) if level == 0 else self.levels[level - 1] + 1  # tree rows read now
            if level == 0:
                out = self.read_root(state.root)
            else:
                self.part()
                out = self.lm.forward(self.draft_tokens(tokens[:, rows - 1]), torch.full((rows.numel(),), level),
                                      self.mask[rows][:, : fed + rows.numel()])
            fed += rows.numel()
            seen = seen_along_tree(state.seen, tokens, shape)[:, rows] if cfg.uses_history else None
            allowed = None if state.constraint is None else state.constraint.allowed(tokens, shape, rows)
            # [B, M, V] what each read row's children are drawn from
            law = self.draft_law(out.logits, cfg, seen, allowed)
            q[:, rows] = self.reported_law(law, out.logits, cfg, seen).to(q.dtype)
            for m, row in enumerate(rows.tolist()):  # draw each node's children from its own law
                kids = [i for i in range(N) if parents[i] == row - 1]
                if kids:
                    tokens[:, kids] = self.draw(law[:, m], len(kids), state.rng, cfg.greedy)
                    drawn = law[:, m].gather(1, tokens[:, kids]).to(scores.dtype)  # [B, kids]
                    scores[:, [k + 1 for k in kids]] = scores[:, row : row + 1] * drawn
            if self.unsure(out.logits):  # the children just drawn are the last level
                break
        self.unread = self.levels[level]  # the last level drawn: leaves, never read by the draft
        kept = int(self.unread.max()) + 1
        q[:, self.unread + 1] = 1.0 / q.shape[-1]  # leaves draw no children: a placeholder law, never read
        draft_probs = q[:, : kept + 1] if self.kind != "point" else None
        return CandidateTree(tokens[:, :kept], self.shape.prefix(kept), draft_probs, self.kind, scores[:, 1 : kept + 1])

    def plain_step(self, root: torch.Tensor) -> CandidateTree:
        """No drafts this step (the policy's plan): the root joins the tokens the next root forward reads first."""
        lead = self.deferred
        self.skipped = root[:, None] if lead is None else torch.cat([lead, root[:, None].to(lead.device)], dim=1)
        self.deferred = None
        return CandidateTree.empty(root.shape[0], root.device)

    # Hooks, one decision each, so that the harness can plant a bug in exactly one place.
    def draft_law(self, logits: torch.Tensor, cfg: SamplingConfig, seen, allowed=None) -> torch.Tensor:
        """The law children are drawn from: the draft's logits processed as plain sampling would, after the
        constraint's mask along the node's path (allowed [B, M, V]: no draw spent on a token the target can't take)."""
        return process_logits(logits, cfg, seen, allowed)

    def reported_law(self, law: torch.Tensor, logits: torch.Tensor, cfg: SamplingConfig, seen) -> torch.Tensor:
        """The q handed to the verifier: the very law the children were drawn from (mask included)."""
        return law

    def draft_room(self, root: torch.Tensor) -> int | None:
        """Levels the draft can still read before its context ends (None: no limit): what is deferred and the
        root come first."""
        if self.lm.max_positions is None:
            return None
        lead = 0 if self.deferred is None else self.deferred.shape[1]
        return self.lm.max_positions - int(self.lm.length.max()) - lead - self.root_width(root)

    def root_width(self, root: torch.Tensor) -> int:
        """Draft tokens the root takes (one: the same vocabulary)."""
        return 1

    def draft_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Tree tokens (the target's ids) as the draft model reads them: the same ids (another vocabulary maps them,
        proposers/cross_vocab.py)."""
        return tokens

    def draw(self, law: torch.Tensor, count: int, rng, point_mass: bool) -> torch.Tensor:
        """count children [B, count] of this proposer's kind from law [B, V]."""
        return draw_children(law, count, self.kind, rng, point_mass=point_mass)

    def read_root(self, root: torch.Tensor):
        """The root's forward (root [B]); the tokens the last commit deferred go first and are committed."""
        lead, self.deferred = self.deferred, None
        if lead is None and self.copies and bool((root == root[0]).all()):  # one read serves every copy
            out = self.lm.forward(root[:1, None], torch.zeros(1, dtype=torch.long), self.mask[:1, :1])
            return LMOutput(out.logits.expand(self.copies, -1, -1), None)
        self.part()
        if lead is None:
            return self.lm.forward(root[:, None], torch.zeros(1, dtype=torch.long), self.mask[:1, :1])
        K = lead.shape[1]
        out = self.lm.forward(torch.cat([lead, root[:, None].to(lead.device)], dim=1), torch.arange(K + 1),
                              torch.ones(K + 1, K + 1, dtype=torch.bool).tril(), logits_rows=torch.tensor([K]))
        self.lm.commit_leading(K)  # the root stays pending: slot 0 of this step's tree
        return out

    def read_deferred(self) -> None:
        """Commit the deferred tokens (draft ids) now, at this batch size, where the draft's context holds them and
        the root after them (else the root's forward reads them, or finds the draft full)."""
        K = self.deferred.shape[1]
        if self.exhausted or K == 0 or (self.lm.max_positions is not None
                                        and int(self.lm.length.max()) + K + 1 > self.lm.max_positions):
            return
        lead, self.deferred = self.deferred, None
        self.lm.forward(lead, torch.arange(K), torch.ones(K, K, dtype=torch.bool).tril(),
                        logits_rows=torch.tensor([K - 1]))
        self.lm.commit_leading(K)

    def part(self) -> None:
        """Give every copy its own row of the draft's cache (before a read or a commit that tells them apart)."""
        if self.copies:
            copies, self.copies = self.copies, 0
            self.lm.select(torch.zeros(copies, dtype=torch.long))

    def unsure(self, logits: torch.Tensor) -> bool:
        """logits [B, M, V] of one level: True when no node's draft top-1 probability reaches stop_below."""
        if self.stop_below <= 0.0:
            return False
        return not bool((torch.softmax(logits.float(), dim=-1).amax(-1) >= self.stop_below).any())

    def commit(self, result: Verification) -> None:
        """Keep the accepted nodes' KV; tokens accepted without a draft slot (a deepest node never
        read, or, inside a mix, nodes of another part's tree: path -1) are deferred to the next
        root forward, or, when rows lack different numbers of them, get theirs in one forward now."""
        if self.exhausted:
            return
        self.part()
        if self.deferred is not None:
            raise RuntimeError("commit called twice without a propose between: deferred tokens were never read")
        if self.skipped is not None:  # a plain step: nothing drafted, nothing to keep; the root waits with the rest
            self.deferred, self.skipped = self.skipped, None
            return
        path, accepted = result.path, result.num_accepted  # [B, D] node indices (-1 padded), [B]
        in_draft = (path >= 0) & ~torch.isin(path, self.unread.to(path.device))  # [B, D] nodes with a slot
        kept = torch.minimum(in_draft.long().cumprod(1).sum(1), accepted)  # [B] leading nodes with a slot
        self.lm.keep_path(path.masked_fill(~in_draft, -1), kept)
        missing = accepted - kept  # [B] the rest of each row's accepted tokens
        K = int(missing.max()) if missing.numel() else 0
        if K:  # one forward for all rows, each keeping its own missing ones
            index = (kept[:, None] + torch.arange(K, device=kept.device)).clamp_max(result.tokens.shape[1] - 1)
            tokens = result.tokens.gather(1, index.to(result.tokens.device)).clamp_min(0)  # [B, K]
            if bool((missing == K).all()):
                self.deferred = tokens
                return
            self.lm.forward(tokens, torch.arange(K), torch.ones(K, K, dtype=torch.bool).tril())
            self.lm.keep(torch.arange(K).expand(path.shape[0], K), missing)

    def join(self, other: DraftModelProposer) -> None:
        for side in (self, other):
            side.settle()
        self.lm.join(other.lm)
        self.exhausted = self.exhausted or other.exhausted  # (the draft's context full for one side: no more drafts)

    def settle(self) -> None:
        """Read what waits (deferred tokens), so that every row's draft cache holds all it committed."""
        if self.skipped is not None:
            raise RuntimeError("a proposer joins another between steps only: a plain step waits for its commit")
        self.part()
        if self.deferred is not None:
            self.read_deferred()
            if self.deferred is not None:  # no room in the draft's context: it drafts nothing more
                self.exhausted, self.deferred = True, None

    def select(self, rows: torch.Tensor) -> None:
        if self.deferred is not None and rows.numel() > self.lm.batch_size:
            self.read_deferred()  # copies of one prefill: one read of its tokens, not one per copy
        if (self.lm.batch_size == 1 and not self.copies and self.deferred is None and self.skipped is None
                and rows.numel() > 1 and not bool(rows.any())):
            self.copies = rows.numel()  # the cache is copied when the copies first differ (their first own read)
            return
        self.part()
        self.lm.select(rows)
        if self.deferred is not None:
            self.deferred = self.deferred[rows.to(self.deferred.device)]
        if self.skipped is not None:
            self.skipped = self.skipped[rows.to(self.skipped.device)]
