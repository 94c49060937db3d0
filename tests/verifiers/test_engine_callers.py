"""The verifier as tree engines call it: accepted slots back, sibling links in the caller's order, unused
slots skipped, slots in any order, a cap on accepted drafts (SGLang's layout: verifiers.adapters.linked_trees)."""

import pytest
import torch

from framework.core.randomness import ReplaySource
from verifiers.adapters import flat_trees, linked_trees
from verifiers.links import order_links


def one_hot(ids, vocab=8):
    return torch.nn.functional.one_hot(torch.tensor(ids), vocab).double()


def random_linked(B, S, V, kind, seed):
    """Random trees in S slots per request, slots shuffled, some unused; with the same trees written
    independently in the flat parents form (breadth-first, siblings in link order) for the reference."""
    g = torch.Generator().manual_seed(seed)
    first_child = torch.full((B, S), -1, dtype=torch.long)
    next_sibling = torch.full((B, S), -1, dtype=torch.long)
    flat_tokens, flat_parents, counts, slot_lists = [], [], [], []
    candidates = torch.randint(V, (B, S), generator=g)
    for b in range(B):
        used = int(torch.randint(1, S, (1,), generator=g))  # slots 1..S-1 shuffled; the first `used` are nodes
        slots = (torch.randperm(S - 1, generator=g) + 1)[:used].tolist()
        parent_of = {}  # node index (in creation order) -> parent node index
        children: dict[int, list[int]] = {-1: []}
        for i in range(used):
            parent = int(torch.randint(-1, i, (1,), generator=g)) if i else -1
            parent_of[i] = parent
            children.setdefault(parent, []).append(i)
            children.setdefault(i, [])
        for parent, kids in children.items():  # link in creation order
            parent_slot = 0 if parent == -1 else slots[parent]
            if kids:
                first_child[b, parent_slot] = slots[kids[0]]
                for a, c in zip(kids, kids[1:]):
                    next_sibling[b, slots[a]] = slots[c]
        if kind == "wor":  # siblings hold distinct tokens
            for kids in children.values():
                for rank, c in enumerate(kids):
                    candidates[b, slots[c]] = rank % V
        order, queue = [], list(children[-1])  # breadth-first, siblings as linked
        while queue:
            node = queue.pop(0)
            order.append(node)
            queue += children[node]
        place = {node: k for k, node in enumerate(order)}
        flat_tokens += [int(candidates[b, slots[n]]) for n in order]
        flat_parents += [-1 if parent_of[n] == -1 else place[parent_of[n]] for n in order]
        counts.append(used)
        slot_lists.append([slots[n] for n in order])
    p = torch.softmax(torch.randn(B, S, V, generator=g) * 2, -1).double()
    q = torch.softmax(torch.randn(B, S, V, generator=g) * 2, -1).double() if kind != "point" else None
    if q is not None:  # every candidate possible under the law it was drawn from
        q = (q + 0.05) / (q + 0.05).sum(-1, keepdim=True)
    flat_rows = [[b * S] + [b * S + s for s in slot_lists[b]] for b in range(B)]
    rows = torch.tensor([r for request in flat_rows for r in request])
    flat = dict(draft_token_ids=torch.tensor(flat_tokens, dtype=torch.long), num_draft_tokens=counts,
                parents=flat_parents, draft_probs=None if q is None else q.reshape(B * S, V)[rows],
                target_probs=p.reshape(B * S, V)[rows])
    return (candidates, first_child, next_sibling, p, q), flat, slot_lists


@pytest.mark.parametrize("kind", ["point", "iid", "wor"])
def test_linked_trees_decide_as_the_same_trees_in_flat_form(kind):
    B, S, V = 40, 7, 5
    linked, flat, slot_lists = random_linked(B, S, V, kind, seed=3)
    g = torch.Generator().manual_seed(1)
    draws = [torch.rand(B, S, S, generator=g, dtype=torch.float64), torch.rand(B, generator=g, dtype=torch.float64)]

    def replay(depth, width):  # the walk asks for [B, depth + 1, widest - 1]: the same leading coins for both
        return ReplaySource([draws[0][:, : depth + 1, :width].contiguous(), draws[1]])

    candidates, first_child, next_sibling, p, q = linked
    reference = flat_trees(**flat, kind=kind, rng=_Lazy(replay))
    ours = linked_trees(candidates, first_child, next_sibling, p, q, kind=kind, rng=_Lazy(replay))
    assert torch.equal(ours.tokens, reference.tokens) and torch.equal(ours.num_accepted, reference.num_accepted)
    for b in range(B):  # accepted nodes as the caller's slots and flat rows b * S + slot
        expected = [slot_lists[b][i] for i in reference.accepted_slots[b].tolist() if i >= 0]
        got = [s for s in ours.accepted_slots[b].tolist() if s >= 0]
        assert got == expected
        assert ours.accept_index[b].tolist()[: len(got) + 1] == [b * S] + [b * S + s for s in got]
        assert candidates[b, got].tolist() == ours.tokens[b, : len(got)].tolist()
    assert (ours.num_accepted > 0).any() and (ours.num_accepted < torch.tensor(flat["num_draft_tokens"])).any()


class _Lazy:
    """A source that builds its replay on the first uniform request, from the shape asked for."""

    def __init__(self, make):
        self.make, self.source = make, None

    def uniform(self, shape, device="cpu"):
        self.source = self.make(shape[1] - 1, shape[2])
        return self.source.uniform(shape, device)

    def categorical(self, probs):
        return self.source.categorical(probs)


def test_siblings_are_tried_in_the_linked_order():
    # root's children: slot 3 (token 3) first, then slot 1 (token 1); p gives each half: the first tried wins at u = 0.3
    candidates = torch.tensor([[0, 1, 2, 3]])
    first_child, next_sibling = torch.tensor([[3, -1, -1, -1]]), torch.tensor([[-1, -1, -1, 1]])
    p = torch.stack([0.5 * one_hot([1]) + 0.5 * one_hot([3])] + [one_hot([0])] * 3, 1)  # [1, 4, V]
    out = linked_trees(candidates, first_child, next_sibling, p, None,
                       rng=ReplaySource([torch.full((1, 2, 2), 0.3, dtype=torch.float64),
                                         torch.zeros(1, dtype=torch.float64)]))
    assert out.accepted_slots.tolist() == [[3]] and out.tokens.tolist() == [[3, 0, -1]]
    assert out.accept_index.tolist() == [[0, 3]]  # slot 2 is unused: linked from nowhere, skipped


def test_max_accepted_cuts_the_trees_before_any_coin():
    # two chains of 3 whose every draft the target takes: a cap of [1, 2] accepts 1 and 2, then draws at the cut
    tokens = torch.tensor([1, 2, 3, 4, 5, 6])
    target = torch.cat([one_hot([1, 2, 3, 7]), one_hot([4, 5, 6, 7])])  # per request: the root's law, then each node's
    out = flat_trees(tokens, [3, 3], [-1, 0, 1] * 2, None, target, max_accepted=torch.tensor([1, 2]))
    assert out.tokens.tolist() == [[1, 2, -1], [4, 5, 6]]  # as wide as the deepest walked tree allows
    assert out.accepted_slots.tolist() == [[0, -1], [0, 1]] and out.accept_index.tolist() == [[0, 1, -1], [4, 5, 6]]
    candidates = torch.tensor([[0, 1, 2, 3], [0, 4, 5, 6]])
    chain = torch.tensor([[1, 2, 3, -1]] * 2)
    p = torch.stack([one_hot([1, 2, 3, 7]), one_hot([4, 5, 6, 7])])
    linked = linked_trees(candidates, chain, torch.full((2, 4), -1), p, max_accepted=2)
    assert linked.tokens.tolist() == [[1, 2, 3], [4, 5, 6]] and linked.num_accepted.tolist() == [2, 2]


@pytest.mark.parametrize("first_child, next_sibling, message", [
    ([[1, 1, -1]], [[-1, -1, -1]], "slot 1 is linked from two places"),
    ([[1, -1, -1]], [[-1, 1, -1]], "slot 1 is linked from two places"),
    ([[1, -1, -1]], [[-1, 0, -1]], r"next_sibling\[1\] = 0 is not a draft slot"),
    ([[1, -1, 5]], [[-1, -1, -1]], r"first_child\[2\] = 5 is not a draft slot"),
    ([[1, -1, -1]], [[2, -1, -1]], r"slot 0 is the root, which has no siblings, but next_sibling\[0\] = 2"),
])
def test_links_that_are_no_tree_are_refused(first_child, next_sibling, message):
    with pytest.raises(ValueError, match=message):
        order_links(torch.tensor(first_child), torch.tensor(next_sibling))


def test_a_cycle_off_the_root_is_skipped_as_unused():
    # slots 2 and 3 link to each other, hanging under no node: left out, as unused slots are
    order = order_links(torch.tensor([[1, -1, 3, -1]]), torch.tensor([[-1, -1, -1, 2]]))
    assert order.counts.tolist() == [1] and order.slots.tolist() == [[1, -1, -1]]


VOCAB = 8


@pytest.mark.parametrize("change, message", [
    (dict(first_child=torch.tensor([[1, 2, -1]])), r"first_child must be \[B, S\] = \[1, 4\]"),  # a slot narrower
    (dict(next_sibling=torch.full((2, 4), -1)), r"next_sibling must be \[B, S\] = \[1, 4\]"),
    (dict(target_probs=torch.full((1, 3, VOCAB), 1.0 / VOCAB)), r"target_probs must be \[B, S, V\] = \[1, 4, V\]"),
    (dict(draft_probs=torch.full((1, 4, VOCAB + 1), 1.0 / (VOCAB + 1))), r"draft_probs' vocabulary"),
])
def test_linked_trees_compare_the_sizes_of_every_field_before_reading_them(change, message):
    """Links one slot narrower than the candidates used to drop a used slot silently (issue 58, case 7)."""
    fields = dict(candidates=torch.tensor([[0, 1, 2, 3]]), first_child=torch.tensor([[1, 2, 3, -1]]),
                  next_sibling=torch.full((1, 4), -1), target_probs=torch.full((1, 4, VOCAB), 1.0 / VOCAB),
                  draft_probs=None)
    fields.update(change)
    with pytest.raises(ValueError, match=message):
        linked_trees(**fields)
