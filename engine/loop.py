"""The decoding loop: prefill -> propose -> forward_tree -> verify -> commit -> repeat.

Plain decoding is the same loop with an empty tree. The engine never looks at which method
proposed: any Proposer goes. One random source serves every coin, so a seed reproduces the text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from framework.core.constraint import Constraint, prune_forbidden, root_mask
from framework.core.logprobs import TokenLogprobs, reported_sampling, token_logprobs
from framework.core.policy import FixedPolicy, Plan, Policy
from framework.core.prompts import prompt_lengths, ragged_batch
from framework.core.proposer import DecodeState, Proposer, SideRowProposer
from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import RandomSource, TorchSource
from framework.core.renamed import renamed
from framework.core.rows import cat_rows
from framework.core.sampling import (
    SamplingConfig,
    mark_seen,
    process_logits,
    process_tree_logits,
    seen_along_tree,
    seen_tokens,
)
from framework.core.target import Target
from framework.core.tree import CandidateTree
from verifiers import LOSSLESS, Verification, Verifier, verify


@dataclass(frozen=True)
class DecodeOptions:
    """How the loop decodes besides the sampling law, grouped so that a call names only what it changes."""

    verifier: Verifier = LOSSLESS  # the verification rule (verifiers/): lossless unless a lossy one is named
    # how much to speculate each step (None: as the proposer is configured; framework.control.goodput.GoodputPolicy
    # sizes each step to its expected tokens per second)
    policy: Policy | None = None
    constraint: Constraint | None = None  # a grammar the output follows (framework.constraints.grammar)
    eos_token_id: int | None = None  # a row stops after emitting it
    # None, or n >= 0: keep each emitted token's log-probability and the n most likely alternatives there
    logprobs: int | None = None


@dataclass
class StepStats:
    accepted: torch.Tensor  # [B'] accepted tree nodes this step, per row still decoding
    draft_s: float
    target_s: float
    verify_s: float
    other_s: float
    nodes: int = 0  # tree nodes verified this step
    rows: torch.Tensor | None = None  # [B'] which rows of the batch as it started these are (finished rows leave it)
    side_rows: int = 0  # a proposer's side rows in the step's forward
    drafted: torch.Tensor | None = None  # [B'] depth of the tree each row was offered (0: a row that may not speculate)
    # [B'] tokens each row kept (generate fills it: EOS and the budget cut the last)
    emitted: torch.Tensor | None = None


@dataclass
class GenerationStats:
    prefill_s: float = 0.0
    steps: list[StepStats] = field(default_factory=list)

    @property
    def target_forwards(self) -> int:
        """Verification forwards after the prefill."""
        return len(self.steps)

    @property
    def accepted_total(self) -> int:
        """Draft tokens accepted over every step and row (each step also emits one target token per row)."""
        return sum(int(s.accepted.sum()) for s in self.steps)

    def per_row(self, batch_size: int) -> torch.Tensor:
        """[steps, batch_size] accepted nodes per step and row of the batch as it started; -1 where a row had
        already left the batch."""
        table = torch.full((len(self.steps), batch_size), -1, dtype=torch.long)
        for i, step in enumerate(self.steps):
            table[i, step.rows if step.rows is not None else slice(None)] = step.accepted.cpu().long()
        return table

    def summary(self) -> dict:
        """Means over the (step, row) pairs that decoded: a row that finished is not counted after it."""
        accepted = torch.cat([s.accepted.float().flatten().cpu() for s in self.steps]) if self.steps else torch.zeros(0)
        split = {k: sum(getattr(s, k) for s in self.steps) for k in ("draft_s", "target_s", "verify_s", "other_s")}
        total = sum(split.values())
        return {
            "steps": len(self.steps),
            "mean_accepted": float(accepted.mean()) if self.steps else 0.0,
            "tokens_per_forward": float(accepted.mean() + 1) if self.steps else 0.0,
            "nodes_per_step": sum(s.nodes for s in self.steps) / len(self.steps) if self.steps else 0.0,
            "prefill_s": self.prefill_s,
            "loop_s": total,
            **split,
            **{k.replace("_s", "_frac"): (v / total if total else 0.0) for k, v in split.items()},
        }


@dataclass
class GenerationOutput:
    tokens: torch.Tensor  # [B, T] new tokens; -1 after a row's EOS or its budget
    stats: GenerationStats
    logprobs: TokenLogprobs | None = None  # [B, T] (and [B, T, n] alternatives) when generate was asked for them


# generate's and Decoder's former keywords, now fields of DecodeOptions: refused by name
MOVED_TO_OPTIONS = {name: f"options=DecodeOptions({name}=...)"
                    for name in ("verifier", "policy", "constraint", "eos_token_id", "logprobs")}


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # a split of GPU time needs the queue drained
    return time.perf_counter()


class Decoder:
    """One decoding session over a target, with or without a proposer."""

    @renamed(**MOVED_TO_OPTIONS, top_logprobs="options=DecodeOptions(logprobs=...)")
    def __init__(self, target: Target, proposer: Proposer | None, sampling: SamplingConfig, rng: RandomSource,
                 options: DecodeOptions = DecodeOptions(), speculate: torch.Tensor | None = None):
        """options: the verifier, policy, constraint, stop token and log-probabilities (DecodeOptions); the
        constraint is masked at every tree node, the log-probabilities kept in `logprobs` after every prefill and
        step (framework/core/logprobs.py). speculate [B] bool: rows that may accept drafts (False: that row decodes
        plainly, in the same batch)."""
        if not isinstance(options, DecodeOptions):
            raise TypeError(f"options must be a DecodeOptions, got {type(options).__name__}")
        top_logprobs = options.logprobs
        if top_logprobs is not None and (isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int)
                                         or top_logprobs < 0):
            raise ValueError(f"top_logprobs must be None or an integer >= 0, got {top_logprobs!r}")
        if top_logprobs is not None and top_logprobs > target.vocab_size:
            raise ValueError(f"top_logprobs={top_logprobs} asks for more alternatives than the vocabulary's "
                             f"{target.vocab_size} tokens")
        self.target, self.proposer, self.sampling, self.rng = target, proposer, sampling, rng
        self.eos_token_id, self.verifier = options.eos_token_id, options.verifier
        self.constraint, self.top_logprobs = options.constraint, top_logprobs
        self.logprobs: TokenLogprobs | None = None  # of the tokens the last prefill or step emitted
        self.policy = options.policy or FixedPolicy()
        self.speculate = None if speculate is None else speculate_flags(speculate)
        self.stats = GenerationStats()
        self.state: DecodeState | None = None
        self.rows = torch.zeros(0, dtype=torch.long)  # the rows still in the batch, numbered in the order they started
        self.started = 0  # rows started so far (the prefill's, then those joined)
        self._plain: CandidateTree | None = None

    def plain_tree(self, batch_size: int) -> CandidateTree:
        """The empty tree of plain decoding, built (and validated) once, not at every step."""
        if self._plain is None or self._plain.tokens.shape[0] != batch_size:
            self._plain = CandidateTree.empty(batch_size, self.target.device)
        return self._plain

    def prefill(self, input_ids: torch.Tensor, copies: int = 1, root: torch.Tensor | None = None) -> torch.Tensor:
        """Run the prompts [B, L] (-1 after a shorter one: framework/core/prompts.py); returns the first new
        token [B], sampled from the target.

        copies > 1 (with B = 1) shares this one prefill among `copies` independent rows.
        root [B] (or [1] with copies): take this token as the first one instead of sampling it, so
        the first step speculates the continuation of the prompt followed by root.
        """
        if copies > 1 and input_ids.shape[0] != 1:
            raise ValueError("prefill copies need a single-row prompt")
        start = _clock(self.target.device)
        if self.constraint is not None:
            self.constraint.start(input_ids.shape[0])
        if self.proposer is not None:  # first: a proposer may settle its needs against the target here
            self.proposer.prefill(input_ids, self.target)
        # needs are declared, not wired (and a target reused from an earlier run computes no more)
        self.target.provide_hidden(self.proposer.hidden_layers if self.proposer is not None else ())
        out = self.target.prefill(input_ids)
        logits, hidden = out.logits[:, -1], out.hidden  # hidden [B, L, layers, H]: every prompt position
        seen = seen_tokens(input_ids.to(self.target.device), self.target.vocab_size)
        allowed = None if self.constraint is None else root_mask(self.constraint, logits.shape[0], logits.device)
        law = process_logits(logits, self.sampling, seen, allowed)  # once: copies share it
        if copies > 1:
            self.target.select(torch.zeros(copies, dtype=torch.long))
            if self.proposer is not None:
                self.proposer.select(torch.zeros(copies, dtype=torch.long))
            if self.constraint is not None:
                self.constraint.select(torch.zeros(copies, dtype=torch.long))
            logits, seen, law = logits.expand(copies, -1), seen.expand(copies, -1), law.expand(copies, -1)
            allowed = None if allowed is None else allowed.expand(copies, -1)
            hidden = None if hidden is None else hidden.expand(copies, *hidden.shape[1:])
        if root is None:
            root = self.rng.categorical(law)
        root = root.to(logits.device).expand(logits.shape[0])
        if self.constraint is not None:
            self.constraint.advance(root[:, None])
        if self.top_logprobs is not None:
            reported = process_logits(logits, reported_sampling(self.sampling), seen, allowed) \
                if self.sampling.greedy else law
            self.logprobs = token_logprobs(reported[:, None], root[:, None], self.top_logprobs)
        self.rows = torch.arange(root.shape[0])
        self.started = root.shape[0]
        if self.speculate is not None and self.speculate.shape != root.shape:
            raise ValueError(f"speculate must hold one flag per row ({root.shape[0]}), "
                             f"got shape {tuple(self.speculate.shape)}")
        self.policy.start(self.target, root.shape[0])
        count = prompt_lengths(input_ids).to(root.device).expand(root.shape[0])  # [B] each row's prompt
        self.state = DecodeState(root, mark_seen(seen, root[:, None]), self.sampling, self.rng, None, hidden,
                                 None if hidden is None else count, constraint=self.constraint)
        self.stats.prefill_s += _clock(self.target.device) - start
        return root

    def step(self, max_depth: int | None = None) -> torch.Tensor:
        """One speculative step; returns the emitted tokens [B, N+1], -1 padded. max_depth: no node
        deeper (the tokens still wanted, less the one every step emits); the context's room cuts too."""
        device = self.target.device
        t0 = _clock(device)
        plan = self.plan()
        state = self.state = replace(self.state, plan=plan)
        tree = self.proposer.propose(state) if self.proposer is not None else self.plain_tree(state.root.shape[0])
        # the cuts: each keeps whole subtrees of what it is given, and its nodes remember their drafted indices
        tree = self.policy.trim(tree).within_depth(self.depth_limit(max_depth, plan.depth))
        allowed = None
        if self.constraint is not None:  # masks along every path; point nodes no row may take go before the forward
            tree, allowed = prune_forbidden(tree, self.constraint.allowed(tree.tokens, tree.shape))
        side = self.proposer.side_rows(tree) if isinstance(self.proposer, SideRowProposer) and plan.drafts else None
        t1 = _clock(device)
        out = self.target.forward_tree(state.root, tree, side, plan.rows)
        t2 = _clock(device)
        p = self.target_laws(out.logits, state, tree, allowed)
        result = self.verify(tree, p, plan.rows)
        t3 = _clock(device)
        self.target.commit(result)
        if self.constraint is not None:
            self.advance_constraint(tree, result)
        if self.top_logprobs is not None:
            self.logprobs = self.emitted_logprobs(out.logits, p, state, tree, allowed, result)
        if side is not None:
            self.proposer.observe_side(out.side_logits)
        if self.proposer is not None:  # in the proposer's own node indices: the nodes cut away are still in its tree
            self.proposer.commit(Verification(result.tokens, result.num_accepted, tree.drafted(result.path)))
        emitted = result.tokens
        root = emitted.gather(1, result.num_accepted[:, None]).squeeze(1)  # recovered/bonus, or -1 after EOS
        root = torch.where(root >= 0, root, self.eos_token_id if self.eos_token_id is not None else 0)
        committed = None if out.hidden is None else committed_rows(out.hidden, result.path)  # [B, D+1, layers, H]
        self.state = state.advance(root, mark_seen(state.seen, emitted), committed,
                                   None if committed is None else result.num_accepted + 1)
        t4 = _clock(device)
        drafted = torch.full((len(self.rows),), tree.shape.max_depth if tree.num_nodes else 0)
        if plan.rows is not None:
            drafted = torch.where(plan.rows.cpu(), drafted, 0)
        stats = StepStats(result.num_accepted, t1 - t0, t2 - t1, t3 - t2, t4 - t3, tree.num_nodes, self.rows,
                          0 if side is None else side.num_rows, drafted)
        self.stats.steps.append(stats)
        self.policy.observe(tree, result, stats)
        return emitted

    def plan(self) -> Plan:
        """The policy's plan for this step, its rows narrowed to those allowed to speculate (None: every row);
        none at all for plain decoding or when no row may speculate."""
        if self.proposer is None or (self.speculate is not None and not bool(self.speculate.any())):
            return Plan(depth=0)
        plan = self.policy.plan()
        rows = plan.rows if self.speculate is None else \
            self.speculate if plan.rows is None else self.speculate & plan.rows.cpu()
        if rows is not None and rows.shape != self.rows.shape:
            raise ValueError(f"the policy planned for {rows.numel()} rows, the batch has {self.rows.numel()}")
        if rows is not None and not bool(rows.any()):
            return Plan(depth=0)
        return replace(plan, rows=None if rows is None or bool(rows.all()) else rows.to(self.target.device))

    def verify(self, tree: CandidateTree, p: torch.Tensor, rows: torch.Tensor | None = None) -> Verification:
        """The verifier on the tree; rows not in `rows` [B] bool (None: all) see none of its nodes (one token from
        the root's law, in the same call: one draw of coins for the batch)."""
        if rows is None or tree.num_nodes == 0:
            return verify(tree, p, rng=self.rng, eos_token_id=self.eos_token_id, verifier=self.verifier, validate=False)
        ragged = RaggedTrees.of_rows(tree, rows)
        result = verify(ragged, p.flatten(0, 1), rng=self.rng, eos_token_id=self.eos_token_id, verifier=self.verifier,
                        validate=False)
        return Verification(result.tokens, result.num_accepted, result.path)

    def target_laws(self, logits: torch.Tensor, state: DecodeState, tree: CandidateTree,
                    allowed: torch.Tensor | None = None) -> torch.Tensor:
        """logits [B, N+1, V] -> the laws the verifier judges by: plain sampling's, each along its node's own
        path, under the constraint's mask there (allowed [B, N+1, V]: every node and the bonus position)
        (a hook: the harness plants a bug here, and nowhere else, to show it is caught)."""
        return process_tree_logits(logits, self.sampling, state.seen, tree.tokens, tree.shape, allowed)

    def advance_constraint(self, tree: CandidateTree, result: Verification) -> None:
        """The constraint follows the emitted tokens only: a rejected path never reaches its state (a hook)."""
        self.constraint.advance(result.tokens)

    def emitted_logprobs(self, logits: torch.Tensor, p: torch.Tensor, state: DecodeState, tree: CandidateTree,
                         allowed: torch.Tensor | None, result: Verification) -> TokenLogprobs:
        """Each emitted token's log-probability under the target's law at its parent: the root's row for the
        first, then each accepted node's (framework/core/logprobs.py)."""
        at_parents = lambda t: None if t is None else committed_rows(t, result.path)  # noqa: E731  [B, D+1, ...]
        if self.sampling.greedy:  # the point mass says nothing: the temperature-1 law of the same rows
            cfg = reported_sampling(self.sampling)
            seen = seen_along_tree(state.seen, tree.tokens, tree.shape) if cfg.uses_history else None
            laws = process_logits(at_parents(logits), cfg, at_parents(seen), at_parents(allowed))
        else:
            laws = at_parents(p)
        return token_logprobs(laws, result.tokens[:, : laws.shape[1]], self.top_logprobs)  # emitted: D + 1 at most

    def select(self, rows: torch.Tensor) -> None:
        """Keep the batch rows `rows` [B'] (those still decoding), in that order: the target's KV, the
        proposer's state and the decode state follow. A finished row leaves the batch: it costs nothing more,
        and its length no longer limits how deep the others' trees may reach."""
        self.target.select(rows)
        if self.proposer is not None:
            self.proposer.select(rows)
        self.policy.select(rows)
        if self.speculate is not None:
            self.speculate = self.speculate[rows.cpu()]
        self.rows = self.rows[rows.cpu()]
        if self.constraint is not None:
            self.constraint.select(rows)
        self.state = self.state.rows(rows)

    def join(self, other: Decoder) -> None:
        """Append the rows of `other` after this batch's (continuous batching: newcomers prefilled apart by a Decoder
        on the same target model, with a fresh proposer of the same configuration, the same sampling and random
        source); from the next step they decode together, each row as it would alone."""
        if other.sampling != self.sampling or other.rng is not self.rng:
            raise ValueError("newcomers join a batch of the same sampling and random source only")
        if (self.proposer is None) != (other.proposer is None) \
                or (self.constraint is None) != (other.constraint is None):
            raise ValueError("newcomers join a batch decoded the same way only (both with a proposer, or neither; "
                             "both under a constraint, or neither)")
        if (self.speculate is None) != (other.speculate is None) or (self.top_logprobs != other.top_logprobs):
            raise ValueError("newcomers join a batch with the same per-row speculation flags "
                             "and log-prob settings only")
        self.target.join(other.target)
        if self.proposer is not None:
            self.proposer.join(other.proposer)
        self.policy.admit(len(other.rows))
        if self.constraint is not None:
            self.constraint.join(other.constraint)
        if self.speculate is not None:
            self.speculate = torch.cat([self.speculate, other.speculate])
        if self.logprobs is not None and other.logprobs is not None:
            self.logprobs = TokenLogprobs(*(cat_rows(a, b) for a, b in zip(
                (self.logprobs.chosen, self.logprobs.top_ids, self.logprobs.top),
                (other.logprobs.chosen, other.logprobs.top_ids, other.logprobs.top))))
        self.rows = torch.cat([self.rows, other.rows + self.started])
        self.started += other.started
        self.state = self.state.joined(other.state)
        self.stats.prefill_s += other.stats.prefill_s

    def depth_limit(self, *wanted: int | None) -> int:
        """The deepest a tree may be this step: each limit wanted (None: none), and what the context has room for."""
        room = self.target.room()
        if room is not None and room < 0:
            raise ValueError(f"a row reached the model's context of {self.target.max_positions} tokens: "
                             "nothing more fits")
        limits = [limit for limit in (*wanted, room) if limit is not None]
        return min(limits) if limits else 1 << 30


def committed_rows(per_row: torch.Tensor, path: torch.Tensor) -> torch.Tensor:
    """per_row [B, N+1, ...] (row 0 = root) -> [B, D+1, ...]: the root's row, then each accepted
    node's (path [B, D] node indices, -1 padded: the padding repeats the root's row)."""
    root = torch.zeros(path.shape[0], 1, dtype=torch.long, device=path.device)
    rows = torch.cat([root, path + 1], dim=1).to(per_row.device)  # [B, D+1]
    index = rows.view(*rows.shape, *([1] * (per_row.dim() - 2))).expand(-1, -1, *per_row.shape[2:])
    return per_row.gather(1, index)


def speculate_flags(speculate) -> torch.Tensor:
    """One bool per row: True/False values (a tensor, list or tuple of them); "yes" or 0.5 are no flags."""
    values = speculate.tolist() if isinstance(speculate, torch.Tensor) else speculate
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)) \
            or not all(isinstance(v, bool) or v in (0, 1) for v in values):
        raise ValueError(f"speculate must be one True/False flag per row, got {speculate!r}")
    return torch.tensor([bool(v) for v in values], dtype=torch.bool)


def check_prompt(target: Target, input_ids, max_new_tokens: int,
                 attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The prompts as a batch in framework/core/prompts.py's form (-1 after a shorter prompt), or a ValueError
    naming what is wrong: a list of prompts, or [B, L] ids with an attention_mask padded on either side."""
    input_ids = ragged_batch(input_ids, attention_mask)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if int(input_ids.max()) >= target.vocab_size:
        raise ValueError(f"prompt token ids must lie in [0, {target.vocab_size})")
    limit = target.max_positions
    if limit is not None and input_ids.shape[1] + max_new_tokens > limit:
        row = int(prompt_lengths(input_ids).argmax())
        raise ValueError(
            f"the prompt of row {row} ({input_ids.shape[1]} tokens) plus max_new_tokens ({max_new_tokens}) "
            f"exceeds the model's context of {limit} tokens"
        )
    return input_ids


@renamed(**MOVED_TO_OPTIONS)
def generate(target: Target, proposer: Proposer | None, input_ids, max_new_tokens: int,
             sampling: SamplingConfig = SamplingConfig(), seed: int | None = None, *,
             options: DecodeOptions = DecodeOptions(), rng: RandomSource | None = None,
             attention_mask: torch.Tensor | None = None, speculate=None) -> GenerationOutput:
    """Speculative decoding (plain decoding when proposer is None). input_ids: [B, L] prompts, a list of prompts of
    any lengths, or [B, L] with an attention_mask padded on either side: each row decodes as it would alone.
    sampling: the target's law; seed or rng: the coins. options: the verifier, the speculation policy, a grammar,
    the stop token, log-probabilities (DecodeOptions). speculate: one bool per row (False: that request decodes
    plainly)."""
    input_ids = check_prompt(target, input_ids, max_new_tokens, attention_mask)
    B = input_ids.shape[0]
    decoder = Decoder(target, proposer, sampling, rng or TorchSource(seed=seed), options, speculate)
    eos_token_id, logprobs = options.eos_token_id, options.logprobs
    out = torch.full((B, max_new_tokens), -1, dtype=torch.long)
    kept = None if logprobs is None else TokenLogprobs(torch.zeros(B, max_new_tokens, dtype=torch.float64),
                                                       torch.zeros(B, max_new_tokens, logprobs, dtype=torch.long),
                                                       torch.zeros(B, max_new_tokens, logprobs, dtype=torch.float64))
    if max_new_tokens == 0:
        return GenerationOutput(out, decoder.stats, kept)
    count = torch.zeros(B, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)

    def emit(tokens: torch.Tensor) -> torch.Tensor:  # tokens [B', K], -1 padded: one per row still in the batch
        before = count[decoder.rows].clone()
        for row, b in enumerate(decoder.rows.tolist()):
            for k, t in enumerate(tokens[row].tolist()):
                if done[b] or t < 0:
                    break
                out[b, count[b]] = t
                if kept is not None:
                    got = decoder.logprobs
                    kept.chosen[b, count[b]], kept.top_ids[b, count[b]], kept.top[b, count[b]] = \
                        got.chosen[row, k], got.top_ids[row, k], got.top[row, k]
                count[b] += 1
                done[b] = bool(count[b] >= max_new_tokens or t == eos_token_id)
        return count[decoder.rows] - before  # [B'] tokens kept per row

    emit(decoder.prefill(input_ids)[:, None].cpu())
    while not bool(done.all()):
        if bool(done[decoder.rows].any()):  # finished rows leave the batch
            decoder.select((~done[decoder.rows]).nonzero().flatten())
        wanted = int((max_new_tokens - count)[decoder.rows].max()) - 1  # drafts past the budget would be thrown away
        tokens = decoder.step(wanted).cpu()
        decoder.stats.steps[-1].emitted = emit(tokens)
    return GenerationOutput(out, decoder.stats, kept)
