"""The optimality oracle: the best expected accepted length any lossless verifier can reach on a tree.

A verifier, whatever its rule, is a coupling: given the drafted tree t (drawn from the draft's
laws), it picks a node n (the accepted path root -> n; the root alone = nothing accepted) and one
more token y. It is lossless iff the stream it starts (path(n), y, then the target's own sampling)
has the target's law on its first D + 1 tokens (D = the tree's depth). Both conditions are linear
in pi(t, n, y) >= 0:
    sum_{n, y} pi(t, n, y) = Q(t)                                       for every draw t
    sum_{t, n, y: path(n) + y prefixes s} pi(t, n, y) P(s_rest | path(n) + y) = P(s)   for every s in V^(D+1)
and the expected accepted length sum pi(t, n, y) depth(n) is the objective: a linear program, solved
exactly (HiGHS) for small vocabularies. `rule_acceptance` is the same number for a real verifier,
by enumerating every draw and coin of the real code, so each rule is measured against the bound.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import scipy.optimize
import scipy.sparse
import torch

from framework.core.tree import CandidateTree
from framework.core.tree_shape import depths
from harness.enumerate import enumerate_law
from verifiers import verify


@dataclass
class ToyLaws:
    """Prefix-dependent target and draft laws over V tokens (softmax of seeded Gaussian logits)."""

    vocab: int
    seed: int = 0
    target_scale: float = 1.5
    draft_scale: float = 1.5
    _cache: dict = field(default_factory=dict, repr=False)

    def _law(self, which: str, prefix: tuple[int, ...]) -> np.ndarray:
        key = (which, prefix)
        if key not in self._cache:
            g = torch.Generator().manual_seed(zlib.crc32(repr((self.seed, key)).encode()))  # the same in every process
            scale = self.target_scale if which == "p" else self.draft_scale
            self._cache[key] = torch.softmax(torch.randn(self.vocab, generator=g, dtype=torch.float64) * scale,
                                             0).numpy()
        return self._cache[key]

    def p(self, prefix: tuple[int, ...]) -> np.ndarray:
        return self._law("p", prefix)

    def q(self, prefix: tuple[int, ...]) -> np.ndarray:
        return self._law("q", prefix)


def _paths(parents: Sequence[int], tokens: Sequence[int]) -> list[tuple[int, ...]]:
    """Token path of the root (empty) and of every node."""
    out: list[tuple[int, ...]] = [()]
    for i, parent in enumerate(parents):
        out.append(out[parent + 1] + (tokens[i],))
    return out


def prefix_law(laws: ToyLaws, seq: tuple[int, ...], start: int = 0) -> float:
    """P(seq[start:] | seq[:start]) under the target."""
    prob = 1.0
    for k in range(start, len(seq)):
        prob *= laws.p(seq[:k])[seq[k]]
    return prob


def point_tokens(parents: Sequence[int], laws: ToyLaws) -> tuple[int, ...]:
    """The point tree a top-k proposer drafts: the j-th child of a node is q's j-th likeliest token there."""
    tokens: list[int] = []
    paths: list[tuple[int, ...]] = [()]
    seen: dict[int, int] = {}
    for parent in parents:
        rank = seen.get(parent, 0)
        seen[parent] = rank + 1
        order = np.argsort(-laws.q(paths[parent + 1]), kind="stable")
        if rank >= len(order):
            raise ValueError(f"a node has more point children ({rank + 1}) than the vocabulary ({len(order)})")
        tokens.append(int(order[rank]))
        paths.append(paths[parent + 1] + (tokens[-1],))
    return tuple(tokens)


def draw_mass(parents: Sequence[int], tokens: tuple[int, ...], laws: ToyLaws, kind: str) -> float:
    """Probability that the proposer drafts `tokens`: iid draws, draws without replacement among
    siblings, or (point) the one top-k tree."""
    if kind == "point":
        return float(tokens == point_tokens(parents, laws))
    paths = _paths(parents, tokens)
    mass, drawn = 1.0, {}
    for i, parent in enumerate(parents):
        q = laws.q(paths[parent + 1])
        earlier = drawn.setdefault(parent, [])
        if kind == "wor":
            if tokens[i] in earlier:
                return 0.0
            mass *= q[tokens[i]] / (1.0 - sum(q[t] for t in earlier))
        else:
            mass *= q[tokens[i]]
        earlier.append(tokens[i])
    return float(mass)


def best_acceptance(parents: Sequence[int], laws: ToyLaws, kind: str = "iid") -> float:
    """The LP's optimum: the most expected accepted nodes of any lossless verifier on trees of `kind`."""
    V, N = laws.vocab, len(parents)
    depth = [0] + depths(torch.tensor(list(parents), dtype=torch.long)).tolist()  # per row: the root, then each node
    D = max(depth)
    streams = {s: i for i, s in enumerate(itertools.product(range(V), repeat=D + 1))}
    rows, cols, vals, masses, objective = [], [], [], [], []
    var = 0
    for d, tokens in enumerate(itertools.product(range(V), repeat=N)):
        paths = _paths(parents, tokens)
        masses.append(draw_mass(parents, tokens, laws, kind))
        for n, path in enumerate(paths):
            for y in range(V):
                head = path + (y,)
                rows.append(d)
                cols.append(var)
                vals.append(1.0)
                for tail in itertools.product(range(V), repeat=D + 1 - len(head)):
                    s = head + tail
                    rows.append(V**N + streams[s])
                    cols.append(var)
                    vals.append(prefix_law(laws, s, len(head)))
                objective.append(-float(depth[n]))
                var += 1
    A = scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(V**N + len(streams), var))
    b = np.concatenate([masses, [prefix_law(laws, s) for s in streams]])
    # Both families of rows add up to the total mass (1), so one row is implied by the others; kept, its
    # rounding (the two sums differ in the last bits) made HiGHS's presolve call the 6-node binary tree over
    # 3 tokens infeasible, though the token rule is a feasible point. The last stream's row goes.
    A, b = A[:-1], b[:-1]
    result = scipy.optimize.linprog(objective, A_eq=A, b_eq=b, bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"the oracle's linear program failed: {result.message}")
    return -float(result.fun)


def rule_acceptance(verifier, parents: Sequence[int], laws: ToyLaws, kind: str = "iid") -> float:
    """Expected accepted nodes of a real verifier on trees of `kind` drawn as `draw_mass` says: every
    draw and coin enumerated (exact)."""
    V, N = laws.vocab, len(parents)
    parent_t = torch.tensor(list(parents), dtype=torch.long)

    def run(source) -> list[int]:
        B = source.batch_size
        tokens = torch.zeros(B, N, dtype=torch.long)
        q = torch.zeros(B, N + 1, V, dtype=torch.float64)
        p = torch.zeros(B, N + 1, V, dtype=torch.float64)
        paths: list[list[tuple[int, ...]]] = [[()] for _ in range(B)]
        for b in range(B):
            q[b, 0], p[b, 0] = torch.from_numpy(laws.q(())), torch.from_numpy(laws.p(()))
        fixed = point_tokens(parents, laws) if kind == "point" else None
        for i, parent in enumerate(parents):
            if fixed is not None:
                tokens[:, i] = fixed[i]
            else:
                law = q[:, parent + 1].clone()  # [B, V]
                if kind == "wor":  # without the siblings already drawn
                    for sibling in (j for j in range(i) if parents[j] == parent):
                        law.scatter_(-1, tokens[:, sibling : sibling + 1], 0.0)
                tokens[:, i] = source.categorical(law)
            for b in range(B):
                path = paths[b][parent + 1] + (int(tokens[b, i]),)
                paths[b].append(path)
                q[b, i + 1], p[b, i + 1] = torch.from_numpy(laws.q(path)), torch.from_numpy(laws.p(path))
        tree = CandidateTree(tokens, parent_t, q, kind)
        return verify(tree, p, rng=source, verifier=verifier).num_accepted.tolist()

    return sum(k * w for k, w in enumerate_law(run).items())
