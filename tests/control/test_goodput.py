"""The goodput policy's parts on known inputs: its cost table, fits, calibration, plans and trims."""

import json

import pytest
import torch

from engine.loop import StepStats
from framework.control.calibration import Calibration
from framework.control.costs import CostTable, StepCosts, measured_costs
from framework.control.estimates import LevelAcceptance, LineFit
from framework.control.goodput import GoodputPolicy
from framework.core.policy import Plan
from framework.core.tree import CandidateTree
from verifiers import Verification

COSTS = {0: 1.0, 1: 1.05, 2: 1.1, 4: 1.2, 8: 1.4, 16: 1.8, 32: 2.6, 64: 4.2}  # a forward by nodes, in plain forwards


def test_the_cost_table_interpolates_and_extrapolates():
    table = CostTable(COSTS)
    assert table(0) == 1.0 and table(3) == pytest.approx(1.15) and table(128) == pytest.approx(4.2 + 1.6 * 2)
    with pytest.raises(ValueError, match="positive cost at 0 nodes"):
        CostTable({1: 1.0})


class CountingTarget:
    def __init__(self, key="model-a"):
        self.key, self.calls = key, 0

    def cost_key(self):
        return self.key

    def forward_costs(self, sizes):
        self.calls += 1
        return {n: 0.01 * (1 + n / 32) for n in sizes}


def test_forward_costs_are_measured_once_per_target_and_batch_and_cached(tmp_path):
    cache, target = tmp_path / "costs.json", CountingTarget()
    first = measured_costs(target, 4, cache)
    again = measured_costs(target, 4, cache)
    assert target.calls == 1 and first.seconds == again.seconds
    measured_costs(target, 16, cache)  # another batch size is another cost
    other = CountingTarget("model-b")
    measured_costs(other, 4, cache)
    assert target.calls == 2 and other.calls == 1
    assert set(json.loads(cache.read_text())) == {"model-a/batch4", "model-a/batch16", "model-b/batch4"}


def test_a_line_fit_recovers_the_line_and_is_per_unit_while_x_never_varied():
    fit = LineFit(decay=1.0)
    fit.add(2, 0.5)
    assert fit(4) == pytest.approx(1.0)  # one x so far: all of it per unit
    for x in (1, 3, 5):
        fit.add(x, 0.1 + 0.2 * x)
    fit.add(2, 0.5)
    assert fit.a == pytest.approx(0.1) and fit.b == pytest.approx(0.2) and fit(0) == pytest.approx(0.1)


def test_a_line_fit_with_a_slope_keeps_it_once_x_stops_varying():
    """The target's fit: steps of one node count only (a chain drafter's) leave the table's slope and shift it; taken
    as all per unit of x, a plain forward came out free (and the plain rate a division by zero)."""
    fit = LineFit(slope=1.0)
    for x, y in [(0.0, 1.0), (0.4, 1.4)] + [(0.1, 1.12)] * 400:  # the table's two points, then one node count
        fit.add(x, y)
    assert fit.b == 1.0 and fit(0) == pytest.approx(1.02)


def test_calibration_learns_that_a_flat_draft_is_accepted_more_than_it_says():
    cal = Calibration(depths=2)
    cal.start(1)
    scores, depth = torch.full((1, 4), 0.05), torch.tensor([1, 1, 1, 1])
    before = cal.value(scores, depth)
    assert torch.allclose(before, torch.full((1, 4), 0.05, dtype=torch.float64))  # no data: the score itself
    for _ in range(30):  # one node of four accepted every step: 0.25 each, five times what the score says
        cal.update(scores, depth, torch.tensor([[True, False, False, False]]))
    after = cal.value(scores, depth)
    assert 0.2 < float(after.mean()) < 0.3


def test_level_acceptance_blends_the_request_with_every_request_before():
    levels = LevelAcceptance(3)
    levels.start(2)
    for _ in range(20):
        levels.update(torch.tensor([3, 0]), 3)  # row 0 accepts everything, row 1 nothing
    rate = levels.expected()
    assert rate[0, 0] > 0.8 and rate[1, 0] < 0.3
    assert bool((rate[:, 1:] <= rate[:, :-1]).all())  # a deeper level never yields more


def point_tree(scores: torch.Tensor) -> CandidateTree:
    """A chain of point nodes with the given scores [B, N]."""
    B, N = scores.shape
    return CandidateTree(torch.arange(B * N).view(B, N) % 7, torch.arange(-1, N - 1), None, "point", scores)


def policy(batch: int = 1, **kw) -> GoodputPolicy:
    p = GoodputPolicy(target_costs=kw.pop("target_costs", COSTS), draft_costs=kw.pop("draft_costs", (0.0, 0.05)), **kw)
    p.start(None, batch)
    return p


def test_trim_keeps_nodes_worth_their_cost_and_drops_the_rest():
    p = policy()
    p.planned = Plan(4)
    sure = point_tree(torch.tensor([[0.99, 0.98, 0.97, 0.96]]))
    assert p.trim(sure).num_nodes == 4  # 0.96 tokens a node for 0.05 of a forward
    unsure = point_tree(torch.tensor([[0.9, 0.01, 0.001, 0.0001]]))
    trimmed = p.trim(unsure)
    assert trimmed.num_nodes == 1 and trimmed.origin.tolist() == [0]
    assert trimmed.scores.tolist() == [[pytest.approx(0.9)]]
    hopeless = point_tree(torch.tensor([[0.001, 0.0005, 0.0001, 0.00001]]))
    assert p.trim(hopeless).num_nodes == 0  # a plain step


def test_trim_leaves_drawn_children_alone():
    p = policy()
    p.planned = Plan(3)
    q = torch.full((1, 4, 5), 0.2)
    iid = CandidateTree(torch.tensor([[1, 2, 3]]), torch.tensor([-1, 0, 1]), q, "iid",
                        torch.tensor([[1e-4, 1e-5, 1e-6]]))
    assert p.trim(iid) is iid  # pruning a drawn child by its own value is not exact


def test_the_same_nodes_are_trimmed_harder_at_a_larger_batch():
    scores = torch.tensor([[0.5, 0.3, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01]])
    per_row = {}
    for batch, scale in ((1, 1.0), (16, 6.0)):  # at 16 rows a node costs 16 rows' worth of compute
        costs = {n: c if n == 0 else 1.0 + (c - 1.0) * scale for n, c in COSTS.items()}
        p = policy(target_costs=costs, batch=batch)
        p.planned = Plan(8)
        per_row[batch] = p.trim(point_tree(scores.expand(batch, -1))).num_nodes
    assert per_row[16] < per_row[1]


def step(accepted, nodes=0):
    return StepStats(torch.as_tensor(accepted), 0.0, 0.0, 0.0, 0.0, nodes)


def test_the_plan_drafts_while_it_pays_and_probes_while_it_does_not():
    p = policy(draft_costs=(0.0, 0.4))  # a level costs 0.4 of a forward
    tree = point_tree(torch.tensor([[0.9, 0.9]]))
    drafted = []
    for _ in range(30):  # every drafted node accepted: drafting pays
        plan = p.plan()
        drafted.append(plan.depth)
        tree_now = tree.within_depth(plan.depth)  # as the engine cuts it
        p.trim(tree_now)
        accepted = tree_now.num_nodes
        p.observe(tree_now, Verification(torch.zeros(1, 3, dtype=torch.long), torch.tensor([accepted]),
                                         torch.arange(accepted)[None]), step([accepted], accepted))
    assert all(d >= 1 for d in drafted[5:])
    plans = []
    for _ in range(200):  # nothing accepted any more
        plan = p.plan()
        plans.append(plan.depth)
        tree_now = tree if plan.drafts else point_tree(torch.zeros(1, 0))
        p.trim(tree_now)
        path = torch.full((1, max(tree_now.num_nodes, 0)), -1)
        p.observe(tree_now, Verification(torch.zeros(1, 1, dtype=torch.long), torch.tensor([0]), path), step([0]))
    late = plans[100:]
    assert late.count(0) > 80 and 0 < sum(d > 0 for d in late) < 20  # plain steps, with a few probes


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="0 < explore < 1"):
        GoodputPolicy(explore=0.0)
    with pytest.raises(ValueError, match="1 <= first_depth <= max_depth"):
        GoodputPolicy(max_depth=0)


@pytest.mark.parametrize("depth", [-1, 1.5, True])
def test_a_plan_of_no_depth_a_policy_could_mean_is_named(depth):
    with pytest.raises(ValueError, match="a plan's depth must be None or an integer >= 0"):
        Plan(depth)


@pytest.mark.parametrize("scores, kept", [
    ([0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92], "all"),
    ([0.9, 0.6, 0.3, 0.05, 0.004, 0.002, 0.001, 0.0005], "some"),
    ([0.001, 0.0005, 0.0002, 0.0001, 5e-5, 2e-5, 1e-5, 5e-6], "none"),
], ids=["sure", "middling", "hopeless"])
def test_rows_alike_keep_the_same_nodes_at_every_batch_size(scores, kept):
    """Where a forward's cost does not grow with the rows (the same cost table at every B, memory-bound), B rows of
    the same tree are worth B times one row's tokens for B times one row's time: the policy keeps the same nodes at
    B = 1, 4 and 16. Values averaged over the rows instead of summed keep fewer at a larger B (issue 52, finding 5)."""
    counts = {}
    for batch in (1, 4, 16):
        p = policy(batch=batch)
        p.planned = Plan(8)
        counts[batch] = p.trim(point_tree(torch.tensor([scores]).expand(batch, -1))).num_nodes
    assert len(set(counts.values())) == 1, counts
    assert {"all": counts[1] == 8, "none": counts[1] == 0, "some": 0 < counts[1] < 8}[kept], counts


class PackingTarget:
    """All the policy reads of a target whose forward skips the nodes of rows kept from drafting."""

    packs_rows = True


@pytest.mark.parametrize("packs", [True, False])
def test_a_row_that_accepts_nothing_stops_drafting_while_the_other_goes_on(packs):
    """Row 0 accepts every node, row 1 none. Where the target skips a row's nodes, the plan soon lets row 0 alone
    draft; where it does not (a row costs its nodes anyway), the plan stays batch-wide."""
    costs = {n: 1.0 + (c - 1.0) * 4 for n, c in COSTS.items()}  # a node: a fifth of a forward
    p = GoodputPolicy(target_costs=costs, draft_costs=(0.0, 0.05))
    p.start(PackingTarget() if packs else None, 2)
    tree = point_tree(torch.full((2, 3), 0.9))
    plans = []
    for _ in range(60):
        plan = p.plan()
        now = tree.within_depth(plan.depth) if plan.drafts else point_tree(torch.zeros(2, 0))
        now = p.trim(now)
        offered = torch.ones(2, dtype=torch.bool) if plan.rows is None else plan.rows
        n = now.num_nodes
        accepted = torch.tensor([n if offered[0] else 0, 0])
        path = torch.tensor([list(range(n)) if offered[0] else [-1] * n, [-1] * n]).view(2, n)
        drafted = torch.where(offered, now.shape.max_depth if n else 0, 0)
        p.observe(now, Verification(torch.zeros(2, n + 1, dtype=torch.long), accepted, path),
                  StepStats(accepted, 0.0, 0.0, 0.0, 0.0, n, drafted=drafted))
        plans.append(plan)
    late = [plan for plan in plans[30:] if plan.drafts and not plan.probe]
    assert len(late) > 20
    if packs:
        assert all(plan.rows is not None and plan.rows.tolist() == [True, False] for plan in late)
    else:
        assert all(plan.rows is None for plan in late)


def empty_steps(p: GoodputPolicy, count: int, seconds=(0.0, 0.0, 0.0, 0.0)) -> list[Plan]:
    """`count` steps in which the proposer finds nothing to draft (no match), whatever the plan; their plans."""
    plans = []
    for _ in range(count):
        plans.append(p.plan())
        tree = point_tree(torch.zeros(1, 0))
        p.trim(tree)
        p.observe(tree, Verification(torch.zeros(1, 1, dtype=torch.long), torch.tensor([0]),
                                     torch.zeros(1, 0, dtype=torch.long)),
                  StepStats(torch.tensor([0]), *seconds, 0, drafted=torch.tensor([0])))  # as the engine says: no tree
    return plans


def test_a_proposer_that_finds_nothing_stops_being_asked():
    """A model-free drafter's search costs time even when it finds no match: a plan that got no tree is a try that
    got nothing, so the plans turn plain, with rare probes (counting only trees offered kept it searching)."""
    plans = empty_steps(policy(draft_costs=(0.1, 0.05)), 300)
    late = [plan.depth for plan in plans[100:]]
    assert late.count(0) > 180 and sum(d > 0 for d in late) >= 1  # probes: 1% of the time, each a fifth of a step


def test_costs_from_a_profile_read_no_clock_and_decide():
    """use_costs (framework.core.policy.CostSized): decisions depend on the given costs, never on the steps'
    timings; a draft that costs more than its tokens are worth is not planned."""
    def plans(costs: StepCosts, seconds) -> list[int]:
        p = GoodputPolicy()
        p.use_costs(costs)
        p.start(None, 1)
        tree, out = point_tree(torch.tensor([[0.9, 0.9]])), []
        for _ in range(40):  # one node of two accepted
            plan = p.plan()
            now = tree.within_depth(plan.depth) if plan.drafts else point_tree(torch.zeros(1, 0))
            p.trim(now)
            accepted = min(now.num_nodes, 1)
            p.observe(now, Verification(torch.zeros(1, 3, dtype=torch.long), torch.tensor([accepted]),
                                        torch.tensor([[0, -1][: now.num_nodes]]).view(1, now.num_nodes)),
                      StepStats(torch.tensor([accepted]), *seconds, now.num_nodes))
            out.append(plan.depth)
        return out

    cheap = StepCosts(COSTS, (0.0, 0.05), (0.01, 0.001), 0.02)
    assert plans(cheap, (0.0, 0.0, 0.0, 0.0)) == plans(cheap, (5.0, 9.0, 3.0, 7.0))  # the clocks say nothing
    assert sum(d > 0 for d in plans(cheap, (0.0,) * 4)[10:]) > 25
    dear = StepCosts(COSTS, (2.0, 1.0), (0.01, 0.001), 0.02)  # a level costs three forwards
    assert sum(d > 0 for d in plans(dear, (0.0,) * 4)[10:]) < 5


def test_the_draft_cost_fit_leaves_out_a_resuming_steps_catch_up():
    """After plain steps a drafter first catches up on their tokens (here 0.5 s): that step's time is a cost of
    resuming, so the fit of drafting on is the steady steps' 0.01 s a level, and a probe is priced at the catch-up."""
    p = GoodputPolicy(target_costs=COSTS)
    p.start(None, 1)
    tree = point_tree(torch.tensor([[0.9]]))
    for resumed in [True, False, False, False, True, False, False]:  # the plans set by hand: one level each
        p.planned, p.resumed = Plan(1), resumed
        p.trim(tree)
        p.observe(tree, Verification(torch.zeros(1, 2, dtype=torch.long), torch.tensor([1]), torch.tensor([[0]])),
                  StepStats(torch.tensor([1]), 0.5 if resumed else 0.01, 1.0, 0.0, 0.0, 1))
    assert p.draft_s(1) == pytest.approx(0.01) and p.draft_s(3) == pytest.approx(0.03)
    assert p.resume_s == pytest.approx(0.5) and p.decide()[2] >= 0.5  # a probe costs the catch-up: probes are rarer


def test_an_idle_stretch_decides_once_every_few_steps(monkeypatch):
    p = policy(draft_costs=(0.1, 0.05))
    empty_steps(p, 100)  # nothing pays by now
    decided = []
    real = p.decide
    monkeypatch.setattr(p, "decide", lambda: decided.append(1) or real())
    plans = empty_steps(p, 80)
    probes = sum(plan.drafts for plan in plans)
    assert len(decided) <= 80 // 8 + 2 * probes + 1 and len(decided) < 20


def test_the_draft_cost_is_fitted_by_the_levels_drafted_not_planned():
    """A proposer configured two levels deep drafts two whatever the plan: its time belongs to two levels (fitted by
    the levels planned, 12, a level looked six times cheaper than it is)."""
    p = GoodputPolicy(target_costs=COSTS)
    p.start(None, 1)
    tree = point_tree(torch.tensor([[0.9, 0.9]]))
    for planned in (2, 12, 12, 2, 12):
        p.planned = Plan(planned)
        p.trim(tree)
        p.observe(tree, Verification(torch.zeros(1, 3, dtype=torch.long), torch.tensor([2]), torch.tensor([[0, 1]])),
                  StepStats(torch.tensor([2]), 0.2, 1.0, 0.0, 0.0, 2))
    assert p.draft_s(2) == pytest.approx(0.2) and p.draft_s(1) == pytest.approx(0.1)


def test_a_one_off_cost_in_a_probe_does_not_stop_the_probes():
    """A proposer's first drafting step may pay a one-off (a cache made, pages first read), here 50 plain steps'
    worth: probes go on, each priced at most two plain steps, and the next one shows the cost was a one-off (priced
    at the one-off, probes came once every 5000 plain steps)."""
    p = GoodputPolicy(target_costs=COSTS)
    p.start(None, 1)
    tree, drafting, probes = point_tree(torch.tensor([[0.9]])), [], 0
    for _ in range(700):  # nothing is ever accepted
        plan = p.plan()
        now = tree if plan.drafts else point_tree(torch.zeros(1, 0))
        p.trim(now)
        seconds = (50.0 if not drafting else 0.1) if plan.drafts else 0.0
        drafting += [seconds] if plan.drafts else []
        probes += plan.probe
        p.observe(now, Verification(torch.zeros(1, 1, dtype=torch.long), torch.tensor([0]),
                                    torch.full((1, now.num_nodes), -1)),
                  StepStats(torch.tensor([0]), seconds, 1.0 + 0.05 * now.num_nodes, 0.0, 0.0, now.num_nodes))
    assert drafting[0] == 50.0 and probes >= 2
    assert p.resume_s < 1.0 and p.decide()[2] < 1.0


def test_the_level_past_the_best_is_tried_before_its_guess_is_trusted():
    """Drafting costs 0.35 s a step plus 0.02 a level, the first level is accepted every other step and the second
    whenever the first is. After one-level steps only, the second is a guess: half the first's acceptance and
    twice its cost (a line through one point), worth less than one level, so without trying it the policy drafts
    one level for good."""
    p = GoodputPolicy(target_costs=COSTS)
    p.start(None, 1)
    tree, depths = point_tree(torch.tensor([[0.5, 0.5]])), []

    def run(plan: Plan, i: int) -> int:
        now = tree.within_depth(plan.depth) if plan.drafts else point_tree(torch.zeros(1, 0))
        p.trim(now)
        accepted = now.num_nodes if i % 2 else 0
        path = torch.tensor([[0, 1][:accepted] + [-1] * (now.num_nodes - accepted)])
        p.observe(now, Verification(torch.zeros(1, 3, dtype=torch.long), torch.tensor([accepted]), path),
                  StepStats(torch.tensor([accepted]), 0.35 + 0.02 * now.num_nodes if plan.drafts else 0.0,
                            1.0 + 0.05 * now.num_nodes, 0.0, 0.0, now.num_nodes))
        return now.shape.max_depth if now.num_nodes else 0

    for i in range(30):  # one level a step, the plans set by hand: the policy has seen one level only
        p.planned, p.resumed = Plan(1), False
        run(p.planned, i)
    depths = [run(p.plan(), i) for i in range(300)]
    assert sum(d == 2 for d in depths[100:]) > 150


def test_a_plain_step_is_never_priced_at_nothing():
    """Steps far faster than the cost table they are fitted to (a table measured under load), every one drafting: the
    fit's forward of no nodes falls to zero and no plain step ever priced the rest; the plain rate must stay finite
    (it divided by zero) and the plans go on."""
    p = GoodputPolicy(target_costs=COSTS)  # the proposer's costs from the clock: the fits run
    p.start(None, 1)
    tree = point_tree(torch.tensor([[0.9]]))
    for _ in range(400):
        p.planned = p.plan()
        p.observe(tree, Verification(torch.zeros(1, 2, dtype=torch.long), torch.tensor([1]), torch.tensor([[0]])),
                  StepStats(torch.tensor([1]), 0.0001, 0.001, 0.0, 0.0, 1, drafted=torch.tensor([1])))
    assert p.target_s(0) == 0.0 and p.rest_s == 0.0  # the collapse this guards against did happen
    assert 0.0 < p.plain_s() and torch.isfinite(torch.tensor(p.goodput())) and p.plan().depth is not None
