"""Exactness when a tree's shape is chosen from its own draws: a confidence cut, a stop token, a depth
that follows the path (what every real proposer does), for rules whose proofs take the shape as fixed.

The exact matrix fills fixed shapes. Here one speculative step is played world by world (each world
may draw a tree of its own shape): a node's children are decided from its path alone (`Expand`), drawn
from the draft's law there (i.i.d. or without replacement), and the rule verifies the tree. The law
of the step's tokens, continued by the target's own sampling to D + 1 tokens, must be the target's.
Deciding from the path so far is sound; pruning a drawn child by its value (`prune`) is not, and the
check shows it.
"""

from __future__ import annotations

import itertools
from typing import Callable

import torch

from framework.core.tree import CandidateTree
from harness.enumerate import enumerate_law
from harness.oracle import ToyLaws, prefix_law
from verifiers import verify

Expand = Callable[[tuple[int, ...], ToyLaws], int]  # (a node's path, the laws) -> children to draw under it
Prune = Callable[[tuple[int, ...], int], bool]  # (a node's path, a drawn child's token) -> drop that child


def confidence_cut(threshold: float, max_depth: int, branching: int = 1) -> Expand:
    """`branching` children under a node whose draft top-1 probability is >= threshold (the root always)."""
    def expand(path, laws):
        if len(path) >= max_depth or (path and laws.q(path).max() < threshold):
            return 0
        return branching
    return expand


def stop_token(token: int, max_depth: int, branching: int = 1) -> Expand:
    """`branching` children under every node but those whose last token is `token`."""
    def expand(path, laws):
        return 0 if len(path) >= max_depth or (path and path[-1] == token) else branching
    return expand


def _step(rule, laws: ToyLaws, kind: str, expand: Expand, prune: Prune | None):
    def run(source) -> list[tuple[int, ...]]:  # one world a call: its tree's shape is its own
        paths, tokens, parents, frontier = [()], [], [], [-1]
        while frontier:
            node = frontier.pop(0)
            path, drawn = paths[node + 1], []
            for _ in range(expand(path, laws)):
                law = torch.from_numpy(laws.q(path)).clone()[None]  # [1, V]
                if kind == "wor":
                    law[0, drawn] = 0.0
                token = int(source.categorical(law)[0])
                drawn.append(token)
                if prune is not None and prune(path, token):
                    continue
                tokens.append(token)
                parents.append(node)
                paths.append(path + (token,))
                frontier.append(len(tokens) - 1)
        q = torch.stack([torch.from_numpy(laws.q(p)) for p in paths])[None]  # [1, N+1, V]
        p = torch.stack([torch.from_numpy(laws.p(p)) for p in paths])[None]
        tree = CandidateTree(torch.tensor(tokens, dtype=torch.long).reshape(1, -1), parents, q, kind)
        emitted = verify(tree, p, rng=source, verifier=rule).tokens[0].tolist()
        return [tuple(t for t in emitted if t >= 0)]
    return run


def adaptive_tv(rule, laws: ToyLaws, kind: str, expand: Expand, depth: int, prune: Prune | None = None) -> float:
    """Total variation between the target's law of D + 1 = depth + 1 tokens and one speculative step
    (its tree shaped by `expand`) continued by the target."""
    V = laws.vocab
    step = enumerate_law(_step(rule, laws, kind, expand, prune), batch_size=1)
    law: dict[tuple[int, ...], float] = {}
    for emitted, weight in step.items():
        head = emitted[: depth + 1]
        for tail in itertools.product(range(V), repeat=depth + 1 - len(head)):
            law[head + tail] = law.get(head + tail, 0.0) + weight * prefix_law(laws, head + tail, len(head))
    return sum(abs(law.get(s, 0.0) - prefix_law(laws, s)) for s in itertools.product(range(V), repeat=depth + 1)) / 2
