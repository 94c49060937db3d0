"""The goodput policy: each step, speculate as much as is expected to pay in tokens per second.

Units are seconds and tokens. Kept online:
- acceptance: per request and depth, how often a step that drafted d levels got its level d accepted
  (framework/control/estimates.py); per depth and score bin, how often a node was, which maps the
  proposer's own node scores to acceptance (framework/control/calibration.py);
- costs: the target's forward by node count at this batch size (measured once, cached:
  framework/control/costs.py; a line fitted to the steps' own times maps the table to them), the
  proposer's time as a line in levels drafted (its side rows count as its own), the rest of a plain step
  and what verifying any tree adds to it;
- g, the long-run tokens per second (never below plain decoding's).

plan: the depth d with the most expected tokens from levels 1..d minus g x its extra seconds, or none (a
plain step) when nothing pays; per row, on a target that runs a row kept from speculating as one position
(Target.packs_rows), the rows whose own expected tokens beat g x their share of the tree's target seconds; then a
one-level probe once the plain steps since the last draft have cost
`explore` of what the probe costs, so that the estimates stay current. trim (point trees): the nodes by
calibrated value summed over the batch's rows (a child never above its parent), the first n kept for the n
with the most value minus g x extra seconds; n = 0 leaves a plain step. Maximising value - g x cost at the
long-run rate g is how a ratio (tokens per second) is maximised step by step (Dinkelbach).

Every decision reads the committed past and the draft's own scores, never a coin of the step it sizes:
the verifier's law is the target's whatever is chosen (docs/design.md section 13). With both costs given
(target_costs, draft_costs) no clock is read: decisions are a function of the tokens alone, as the exact
harness needs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from framework.control.calibration import Calibration
from framework.control.costs import CostTable, StepCosts, measured_costs
from framework.control.estimates import LevelAcceptance, LineFit
from framework.core.policy import Plan
from framework.core.tree import CandidateTree

MOST_NODES = 256  # node counts whose cost is tabulated at start (beyond: interpolated on demand)
PROBE_CAP = 2.0  # a probe is priced at most this many plain steps: a one-off cost (a cache made, pages touched first)
# seen in one must not stop the probes that would show it was one
TRIES = 3.0  # steps that drafted a level (decayed counts) before its guessed worth is trusted: the level past the best
# is drafted once in ~30 drafting steps
PLAIN_FLOOR = 0.1  # a plain step is priced at least this share of the table's forward of no nodes: a clock's fit can
# put its intercept at zero (steps faster than the table they are fitted to, none of them plain), and the plain rate
# divides by it
REDECIDE = 8  # plain steps a decision that nothing pays is kept for: only drafting steps teach acceptance, and the
# costs a plain step refines drift slowly, so an idle step costs a few float operations, not a decision


class GoodputPolicy:
    def __init__(self, max_depth: int = 12, rate: float = 0.2, explore: float = 0.01,
                 target_costs: dict | None = None, draft_costs: tuple[float, float] | None = None,
                 cache: str | Path | None = None, first_depth: int = 1, per_row: bool = True):
        """max_depth: the deepest plan; first_depth: the deepest before the proposer has drafted a tree (then
        at most one level past the deepest it drafted); rate: the weight of the newest step in the running means;
        explore: while nothing pays, the share of time spent on one-level probes that keep the estimates current.
        target_costs: seconds of a target forward by node count (None: measured on the target at each batch
        size, cached in `cache`); draft_costs: the proposer's (per step, per level) seconds (None: fitted
        from the steps). With both given the policy reads no clock. per_row: choose the rows that draft (where the
        target skips the others' nodes), not only the depth."""
        if not 1 <= first_depth <= max_depth or not 0 < rate <= 1 or not 0 < explore < 1:
            raise ValueError(f"need 1 <= first_depth <= max_depth, 0 < rate <= 1 and 0 < explore < 1, "
                             f"got {first_depth}, {max_depth}, {rate}, {explore}")
        self.max_depth, self.rate, self.explore, self.per_row = max_depth, rate, explore, per_row
        self.row_choice = False  # per_row, on a target that packs (known at start)
        self.given_target = None if target_costs is None else \
            CostTable({int(k): float(v) for k, v in target_costs.items()})
        self.given_draft = None if draft_costs is None else tuple(float(c) for c in draft_costs)
        self.clocked = self.given_target is None or self.given_draft is None
        self.cache = cache
        self.calibration = Calibration(depths=max_depth)
        self.levels = LevelAcceptance(max_depth)
        self.level_nodes = torch.ones(max_depth, dtype=torch.float64)  # nodes verified at level d
        self.draft_fit = LineFit()  # the proposer's seconds by levels drafted
        self.target_fit = LineFit(slope=1.0)  # the target's seconds by the table's extra seconds for the step's nodes
        # (steps of one node count only, as a chain drafter's: the table's shape, shifted to their times)
        self.rest_s = 0.0  # verification and bookkeeping of a plain step
        self.tree_s = 0.0  # what verifying any tree adds to them
        self.node_s = 0.0  # and what each of its nodes adds (given costs only: a clock sees the table's shape)
        self.tables: dict[int, CostTable] = {}
        self.curves: dict[int, tuple[CostTable, torch.Tensor]] = {}  # id(table) -> it and its seconds by 0..MOST_NODES
        self.rates: dict[int, float] = {}  # batch size -> tokens per second achieved
        self.batch, self.started, self.table, self.curve, self.planned, self.drafted = 1, 1, None, None, Plan(0), 0
        self.idle_s = 0.0  # plain steps' time since the last step that drafted
        self.decision, self.idle_steps = None, 0  # the last decide() and the plain steps planned since
        self.resumed = False  # this step drafts after a plain one
        self.resume_s = 0.0  # the proposer's seconds in such a step (its catch-up on the plain steps' tokens)
        self.reach = first_depth - 1  # the deepest tree drafted so far: plans go at most one level deeper, so a
        # proposer's cost and acceptance are measured level by level before a deep plan is paid for

    # ---- the costs --------------------------------------------------------------------------------

    def use_costs(self, costs: StepCosts) -> None:
        """Decide by a device's measured costs (a device profile's, framework.core.policy.CostSized) from now on:
        no clock is read, so the decisions depend on the tokens and the profile alone."""
        self.given_target, self.given_draft = CostTable(dict(costs.target)), costs.draft
        self.rest_s, self.tree_s, self.node_s = costs.verify[0] + costs.rest, 0.0, costs.verify[1]
        self.clocked = False

    def start(self, target, batch_size: int) -> None:
        self.batch = self.started = batch_size  # rows decoding now; the batch as it started (its table, its rate)
        self.decision = None
        self.row_choice = self.per_row and target is not None and target.packs_rows  # None: costs given, no target
        if self.given_target is not None:
            self.table = self.given_target
        else:
            if batch_size not in self.tables:
                self.tables[batch_size] = measured_costs(target, batch_size, self.cache)
            self.table = self.tables[batch_size]
        if id(self.table) not in self.curves:  # a table's curve once (257 lookups: a millisecond each generation else)
            tabulated = torch.tensor([self.table(n) for n in range(MOST_NODES + 1)], dtype=torch.float64)
            self.curves[id(self.table)] = (self.table, tabulated)  # the table kept: its id stays its own
        curve = self.curves[id(self.table)][1]
        # [n] extra seconds of n nodes; never less for more (the table is noisy)
        self.curve = curve.cummax(0).values - curve[0]
        if not self.target_fit.sums[0]:  # the table itself is the first two observations
            self.target_fit.add(0.0, curve[0])
            self.target_fit.add(float(self.curve[8]), float(curve[0] + self.curve[8]))
        self.levels.start(batch_size)
        self.calibration.start(batch_size)  # what the earlier generations taught stays (the prior, the costs, idle_s)

    def target_s(self, nodes) -> torch.Tensor | float:
        """Seconds of a target forward with `nodes` (an int, or a tensor of them) at this batch size: the
        table's shape, fitted to the steps' own times."""
        if isinstance(nodes, torch.Tensor):
            return self.target_fit(self.curve[nodes.clamp_max(MOST_NODES)])
        return self.target_fit(float(self.curve[nodes]) if nodes <= MOST_NODES else self.table(nodes) - self.table(0))

    def extra_s(self, nodes) -> torch.Tensor | float:
        """What a tree of `nodes` adds to a plain step in the target and the verifier."""
        if isinstance(nodes, torch.Tensor):
            return (self.target_s(nodes) - self.target_s(0) + torch.where(nodes > 0, self.tree_s, 0.0)
                    + self.node_s * nodes)
        return self.target_s(nodes) - self.target_s(0) + (self.tree_s if nodes else 0.0) + self.node_s * nodes

    def draft_s(self, levels):
        """The proposer's seconds for `levels` (an int or a tensor of them)."""
        if self.given_draft is None:
            return self.draft_fit(levels)
        cost = self.given_draft[0] + self.given_draft[1] * levels
        return torch.where(levels > 0, cost, 0.0) if isinstance(levels, torch.Tensor) else (cost if levels else 0.0)

    def plain_s(self) -> float:
        """Seconds of a plain step at this batch size: the target's forward of no nodes and the rest."""
        return max(self.target_s(0) + self.rest_s, PLAIN_FLOOR * self.table(0))

    def goodput(self) -> float:
        """g: tokens per second to beat (the run's own, and never below plain decoding's)."""
        plain = self.batch / self.plain_s()
        return max(plain, self.rates.get(self.started, 0.0))

    # ---- the decisions ----------------------------------------------------------------------------

    def plan(self) -> Plan:
        if self.decision is None or self.idle_steps >= REDECIDE:
            self.decision, self.idle_steps = self.decide(), 0
        best, chosen, probe_s = self.decision
        self.resumed = not self.planned.drafts  # the step before planned none
        if best is not None:
            self.planned = Plan(best + 1, rows=chosen)
        elif self.explore * self.idle_s >= min(probe_s, PROBE_CAP * self.plain_s()):
            # a probe keeps the estimates current while nothing pays
            self.planned = Plan(1, probe=True)
        else:
            self.planned = Plan(0)
        if self.planned.drafts:
            self.idle_s = 0.0
        else:
            self.idle_s += self.plain_s()
            self.idle_steps += 1
        return self.planned

    def decide(self) -> tuple[int | None, torch.Tensor | None, float]:
        """The depth that pays most (None: none pays), the rows that draft (None: all), and a probe's seconds."""
        g = self.goodput()
        tokens = self.levels.expected().cumsum(1)  # [B, D] each row's tokens by the deepest level drafted
        nodes = self.level_nodes.cumsum(0).round().long()
        draft_s = self.draft_s(torch.arange(1, self.max_depth + 1, dtype=torch.float64))
        if self.row_choice:  # a row drafts where its tokens beat g x its share of the tree's seconds
            net = tokens - g * self.extra_s(nodes) / self.batch  # [B, D]
            value, rows = net.clamp_min(0).sum(0) - g * draft_s, net > 0
        else:
            value, rows = tokens.sum(0) - g * (draft_s + self.extra_s(nodes)), None
        reach = min(self.reach + 1, self.max_depth)  # a level past the deepest tree drafted, at most
        best = int(value[:reach].argmax())
        probe_s = max(float(self.draft_s(1)), self.resume_s) + float(self.extra_s(int(nodes[0])))
        if value[best] <= 0:
            return None, None, probe_s
        if best + 1 < reach and self.levels.trials[best + 1] < TRIES:  # the next level's worth is a guess (its
            best += 1  # acceptance as the first's, its drafting cost proportional) until it has been tried
        return best, None if rows is None or bool(rows[:, best].all()) else rows[:, best], probe_s

    def trim(self, tree: CandidateTree) -> CandidateTree:
        self.drafted = tree.shape.max_depth if tree.num_nodes else 0
        self.reach = max(self.reach, self.drafted)
        if tree.kind != "point" or tree.scores is None or tree.num_nodes == 0 or self.planned.probe:
            # iid/wor children keep their draws (the plan's depth sized them); a probe verifies all it drafted
            return tree
        value = (self.node_values(tree) * self.drafting()[:, None]).sum(0)  # [N] over the rows that draft
        order = torch.argsort(tree.depth(), stable=True)
        # best first; ties: the shallower (a parent before its child)
        order = order[torch.argsort(-value[order], stable=True)]
        gain = torch.cat([torch.zeros(1, dtype=torch.float64), value[order].cumsum(0)])  # [N+1] by nodes kept
        net = gain - self.goodput() * self.extra_s(torch.arange(tree.num_nodes + 1)) * self.share()  # [N+1]
        n = int(net.argmax())  # the first of equals: the smaller tree
        return tree if n == tree.num_nodes else tree.keep_nodes(order[:n].sort().values)

    def drafting(self) -> torch.Tensor:
        """[B] float64: 1 for the rows the plan lets draft, else 0."""
        rows = self.planned.rows
        return torch.ones(self.batch, dtype=torch.float64) if rows is None else rows.cpu().double()

    def share(self) -> float:
        """The share of a tree's target seconds the planned rows pay: their share of the batch where the target
        runs only theirs."""
        return float(self.drafting().mean()) if self.row_choice else 1.0

    def node_values(self, tree: CandidateTree) -> torch.Tensor:
        """[B, N] calibrated acceptance of each node, never above its parent's."""
        value = self.calibration.value(tree.scores, tree.depth())
        parents = tree.parents
        for level in tree.shape.levels[1:]:
            value[:, level] = torch.minimum(value[:, level], value[:, parents[level]])
        return value

    # ---- what a step shows ------------------------------------------------------------------------

    def observe(self, tree: CandidateTree, result, step) -> None:
        r = self.rate
        B = result.num_accepted.shape[0]
        offered = None if step.drafted is None else step.drafted > 0  # [B] rows whose tree was verified
        if tree.num_nodes and tree.scores is not None:
            accepted = torch.zeros(B, tree.num_nodes + 1, dtype=torch.bool)
            path = result.path.cpu()
            accepted.scatter_(1, (path + 1).clamp_min(0), path >= 0)
            self.calibration.update(tree.scores, tree.depth(), accepted[:, 1:], offered)
        if self.planned.drafts:
            # the levels verified: a level the trim (or the engine's cut) left out was never tried, so it is not
            # charged; a plan the proposer found nothing for (no match) is a first level tried that got nothing
            depth = min(tree.shape.max_depth, self.planned.depth) if tree.num_nodes else 1
            if not tree.num_nodes:
                offered = self.drafting() > 0
            levels = torch.arange(1, depth + 1)
            nodes = (tree.depth()[None, :] == levels[:, None]).sum(1).double()  # [d]
            self.levels.update(result.num_accepted.cpu(), depth, offered)
            self.level_nodes[:depth] += r * (nodes - self.level_nodes[:depth])
            self.decision = None  # what was learned changes the plan
        tokens = float(result.num_accepted.sum()) + B
        if self.clocked:
            self.observe_costs(tree, step)
            seconds = step.draft_s + step.target_s + step.verify_s + step.other_s
        else:
            seconds = self.draft_s(self.planned.depth) + self.plain_s() + self.extra_s(tree.num_nodes) * self.share()
        # slow, from plain decoding's rate: the long-run rate is the bar (Dinkelbach), not the last steps'
        old = self.rates.get(self.started, self.batch / self.plain_s())
        self.rates[self.started] = old + 0.1 * r * (tokens / seconds - old)

    def observe_costs(self, tree: CandidateTree, step) -> None:
        """The step's timings: the target's against the table (side rows are the proposer's cost), the
        proposer's by levels drafted, the verifier's and the rest with a tree and without."""
        n, side = tree.num_nodes, step.side_rows
        # a step that drafts after plain ones also catches the proposer up on their tokens (a drafter's backlog): a
        # cost of resuming, not of drafting on, so the fit of what drafting costs step after step leaves it out
        fits_draft = self.planned.drafts and self.given_draft is None
        drafting_s = step.draft_s + (max(step.target_s - self.target_s(n), 0.0) if side else 0.0)
        if not side:
            self.target_fit.add(float(self.curve[min(n, MOST_NODES)]) * self.share(), step.target_s)
        if fits_draft and self.resumed:  # what a probe costs: its one level and the catch-up; a lower cost is taken
            # at once (what was paid once more was a one-off), a higher one slowly
            self.resume_s += (self.rate if 0.0 < self.resume_s < drafting_s else 1.0) * (drafting_s - self.resume_s)
        elif fits_draft:  # by the levels the proposer drafted: one that stops short of the plan costs what it drafted
            self.draft_fit.add(self.drafted, drafting_s)
        rest, r = step.verify_s + step.other_s, self.rate
        if n == 0:
            self.rest_s += (r if self.rest_s else 1.0) * (rest - self.rest_s)
        else:
            self.tree_s += r * (max(rest - self.rest_s, 0.0) - self.tree_s)

    def select(self, rows: torch.Tensor) -> None:
        self.levels.select(rows)
        self.calibration.select(rows)
        self.batch, self.decision = int(rows.numel()), None

    def admit(self, count: int) -> None:
        self.levels.admit(count)
        self.calibration.admit(count)
        self.batch, self.decision = self.batch + count, None
