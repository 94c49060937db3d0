"""Token paths -> one point tree: prefixes merged, the budget's best nodes, one shape for the batch."""

import random

import pytest
import torch

from framework.core.path_tree import node_paths, tree_from_paths
from framework.core.tree_shape import TreeShape


def test_shared_prefixes_are_one_node_and_siblings_rank_by_score():
    tree = tree_from_paths([[((3, 4, 1), 2.0), ((3, 5), 1.0), ((7,), 0.5)]], budget=32)
    paths = node_paths(tree)[0]
    assert sorted(paths) == sorted([(3,), (3, 4), (3, 4, 1), (3, 5), (7,)])  # (3,) once
    assert tree.kind == "point" and tree.draft_probs is None
    assert paths.index((3,)) < paths.index((7,)) and paths.index((3, 4)) < paths.index((3, 5))  # best sibling first


@pytest.mark.parametrize("seed", range(20))
def test_budget_keeps_an_ancestor_closed_best_set(seed):
    g = random.Random(seed)
    rows = [[(tuple(g.randrange(4) for _ in range(g.randint(1, 4))), g.choice([1.0, 2.0, 3.0]))
             for _ in range(g.randint(0, 6))]
            for _ in range(g.randint(1, 3))]
    budget = g.randint(1, 8)
    tree = tree_from_paths(rows, budget)
    assert tree.num_nodes <= budget and tree.batch_size == len(rows)
    parents = tree.parents.tolist()
    assert all(p < i for i, p in enumerate(parents))  # topological (the CandidateTree checks it too)
    if len(rows) == 1:  # one row: every node is a real prefix, and the kept ones are the best
        prefixes = {}
        for path, w in rows[0]:
            for end in range(1, len(path) + 1):
                prefixes[path[:end]] = prefixes.get(path[:end], 0.0) + w
        kept = node_paths(tree)[0]
        assert set(kept) <= set(prefixes) and len(kept) == min(budget, len(prefixes))
        worst_kept = min(prefixes[p] for p in kept) if kept else float("inf")
        assert all(prefixes[p] <= worst_kept for p in set(prefixes) - set(kept))


def test_rows_share_one_shape_and_pad_what_they_lack():
    tree = tree_from_paths([[((3, 4), 1.0), ((5,), 1.0)], [((9,), 1.0)]], budget=8, pad_token=0)
    a, b = node_paths(tree)
    assert {(3,), (3, 4), (5,)} == set(a)
    assert (9,) in b and len(set(b)) == 3  # b's other nodes are padding, no path twice
    assert b[a.index((5,))] == (0,) or b[a.index((3,))] == (0,)  # pads start at pad_token


def test_no_path_is_an_empty_tree_and_a_bad_budget_is_named():
    assert tree_from_paths([[], []], budget=4).num_nodes == 0
    with pytest.raises(ValueError, match="budget"):
        tree_from_paths([[((1,), 1.0)]], budget=0)


def reference_tree(rows, budget: int, pad_token: int = 0, depth=None):
    """The same rule row by row in plain Python (tries as dicts), as the tensor version replaced it:
    -> (rank paths in node order, tokens per row, scores per row)."""
    per_row, shares = [], []  # per row: rank path -> (token, score); rank path -> share
    for paths in rows:
        paths = [(tuple(path[:depth] if depth else path), w) for path, w in paths]
        score = {}
        for path, w in paths:
            for end in range(1, len(path) + 1):
                score[path[:end]] = score.get(path[:end], 0.0) + w
        order = {p: i for i, p in enumerate(score)}
        nodes = sorted(score, key=lambda p: (-score[p], len(p), order[p]))[:budget]
        children = {}
        for path in nodes:
            children.setdefault(path[:-1], []).append(path)
        ranks = {}
        for path in sorted(nodes, key=len):
            ranks[path] = ranks.get(path[:-1], ()) + (children[path[:-1]].index(path),)
        total = sum(w for _, w in paths) or 1.0
        per_row.append({r: (p[-1], score[p]) for p, r in ranks.items()})
        shares.append({r: score[p] / total for p, r in ranks.items()})
    held = {}
    for row in per_row:
        for r, (_, s) in row.items():
            count, summed = held.get(r, (0, 0.0))
            held[r] = (count + 1, summed + s)
    ordered = sorted(sorted(held, key=lambda r: (-held[r][0], -held[r][1], len(r), r))[:budget],
                     key=lambda c: (len(c), c))
    tokens = []
    for row in per_row:
        used = {}
        for r in ordered:
            if r in row:
                used.setdefault(r[:-1], set()).add(row[r][0])
        out = []
        for r in ordered:
            token = row[r][0] if r in row else pad_token
            if r not in row:
                while token in used.setdefault(r[:-1], set()):
                    token += 1
                used[r[:-1]].add(token)
            out.append(token)
        tokens.append(out)
    return ordered, tokens, [[share.get(r, 0.0) for r in ordered] for share in shares]


@pytest.mark.parametrize("seed", range(40))
def test_the_tensor_trie_equals_the_row_by_row_rule(seed):
    g = random.Random(seed)
    for _ in range(25):
        vocab = g.choice([2, 3, 6, 40])
        rows = [[(tuple(g.randrange(vocab) for _ in range(g.randint(1, 5))), g.choice([1.0, 2.0, 3.0, 0.5]))
                 for _ in range(g.randint(0, 9))] for _ in range(g.randint(1, 6))]
        budget, depth, pad = g.randint(1, 12), g.choice([None, 1, 2, 3]), g.choice([0, 1])
        ordered, tokens, scores = reference_tree(rows, budget, pad, depth)
        tree = tree_from_paths(rows, budget, pad_token=pad, depth=depth)
        if not ordered:
            assert tree.num_nodes == 0
            continue
        assert tree.shape.parents.tolist() == TreeShape.from_choices(ordered).parents.tolist()
        assert tree.tokens.tolist() == tokens
        assert torch.allclose(tree.scores, torch.tensor(scores, dtype=torch.float32))
