"""The enumerating random source: the exact law of what real code emits, by trying every coin.

The code under test runs unchanged on a batch of "worlds". Row b of every random call belongs
to world b, which follows a trail of choices: given ones first, then the first option at each
new branch point. After a run, every untried option beyond the given trail becomes a new
world. Depth-first, each complete history is run exactly once, with its exact probability.

Uniforms are lazy: a comparison `u < t` is the branch point, True with probability t given
what earlier comparisons of the same u revealed (u's interval shrinks). `u <= t` differs from
`u < t` only at t == 0 and u's lower end 0: torch.rand can return exactly 0.0, so `u <= 0` is
True with a small positive weight, and a token of probability 0 then shows in the support.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Hashable, Sequence

import numpy as np
import torch

ZERO_ATOM = 2.0**-53  # chance that torch.rand returns exactly 0.0 in float64, which TorchSource draws


class EnumeratingSource:
    def __init__(self, trails: Sequence[Sequence[int]]):
        self.given = [list(t) for t in trails]
        lengths = [len(t) for t in trails]
        self.given_length = np.array(lengths, dtype=np.int64)  # [B]
        self.given_table = np.zeros((len(trails), max(lengths, default=0) + 1), dtype=np.int64)  # [B, L + 1]
        for row, trail in enumerate(trails):
            self.given_table[row, : len(trail)] = trail
        self.opened: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # new branch points: (rows, depths, counts)
        self.weights = np.ones(len(trails))
        self.cursor = np.zeros(len(trails), dtype=np.int64)  # [B] each world's branch points so far
        self.retired = np.zeros(len(trails), dtype=bool)

    @property
    def batch_size(self) -> int:
        return len(self.given)

    def retire(self, rows: Sequence[int]) -> None:
        """These worlds' outcomes are settled: later draws no longer branch or weigh (their
        options sum to one, so taking the first without weighing marginalises them out)."""
        self.retired[np.asarray(rows, dtype=np.int64)] = True

    def choose(self, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The option each of many draws takes among its `counts` (> 1) options, in order (a row may draw several
        times), unweighed: the caller weighs what was taken. A world's branch point is its given choice, or at a
        new point the first option. -1: a retired world's draw (it takes the first option and weighs nothing)."""
        rows, counts = np.asarray(rows, dtype=np.int64), np.asarray(counts, dtype=np.int64)
        picks = np.full(len(rows), -1, dtype=np.int64)
        live = np.flatnonzero(~self.retired[rows])
        world = rows[live]
        order = np.argsort(world, kind="stable")  # a world's draws in call order, its worlds side by side
        ranked = world[order]
        turn = np.empty_like(order)
        turn[order] = np.arange(len(ranked)) - np.searchsorted(ranked, ranked)  # [M] the draw's turn in its world
        depth = self.cursor[world] + turn
        np.add.at(self.cursor, world, 1)
        given = depth < self.given_length[world]
        picks[live] = np.where(given, self.given_table[world, np.minimum(depth, self.given_table.shape[1] - 1)], 0)
        new = ~given
        if new.any():
            self.opened.append((world[new], depth[new], counts[live][new]))
        return picks

    def branches(self) -> list[list[int]]:
        """Trails of the worlds this run opened but did not take: a new point's other options, after the given
        trail and the first options taken at the world's earlier new points."""
        if not self.opened:
            return []
        rows, depths, counts = (np.concatenate(parts) for parts in zip(*self.opened))
        out = []
        for k in np.lexsort((depths, rows)).tolist():  # world by world, each world's points in order
            row, depth = int(rows[k]), int(depths[k])
            prefix = self.given[row] + [0] * (depth - len(self.given[row]))
            out.extend(prefix + [alt] for alt in range(1, int(counts[k])))
        return out

    def _check_batch(self, shape) -> None:
        if len(shape) == 0 or shape[0] != self.batch_size:
            raise ValueError(f"random calls must lead with the batch ({self.batch_size}), got shape {tuple(shape)}")

    # ---- RandomSource ---------------------------------------------------------------------

    def uniform(self, shape, device="cpu") -> LazyUniform:
        shape = tuple(shape)
        self._check_batch(shape)
        rows = np.broadcast_to(np.arange(shape[0]).reshape((-1,) + (1,) * (len(shape) - 1)), shape)
        return LazyUniform(self, np.zeros(shape), np.ones(shape), np.zeros(shape, dtype=bool), rows.copy())

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        self._check_batch(probs.shape[:-1])
        flat = probs.detach().to("cpu", torch.float64).reshape(-1, probs.shape[-1]).numpy()
        per_row = flat.shape[0] // self.batch_size
        totals = flat.sum(-1)
        if not np.isfinite(totals).all() or (totals <= 0).any() or (flat < 0).any():
            raise ValueError("categorical: a law is not a distribution (NaN, negative or all zero)")
        positive = flat > 0
        out = positive.argmax(-1)
        branching = np.flatnonzero(positive.sum(-1) > 1)
        if branching.size:
            picks = self.choose(branching // per_row, positive[branching].sum(-1))  # [M] in each support
            ranks = positive[branching].cumsum(-1)  # [M, V] 1 at the first token of the support, 2 at the second...
            chosen = (ranks == (picks.clip(0) + 1)[:, None]).argmax(-1)
            out[branching] = chosen
            taken = picks >= 0
            np.multiply.at(self.weights, branching[taken] // per_row,
                           flat[branching[taken], chosen[taken]] / totals[branching[taken]])
        return torch.from_numpy(out.reshape(probs.shape[:-1])).to(probs.device)


class LazyUniform:
    """Uniforms that are only known through the comparisons made with them.

    Each element lives in [lo, hi) (or sits exactly at lo when `atom`). Indexing with
    integers and slices gives a view sharing that state.
    """

    def __init__(self, source, lo, hi, atom, rows):
        self.source, self.lo, self.hi, self.atom, self.rows = source, lo, hi, atom, rows

    @property
    def shape(self) -> tuple[int, ...]:
        return self.lo.shape

    def __getitem__(self, index) -> LazyUniform:
        return LazyUniform(self.source, self.lo[index], self.hi[index], self.atom[index], self.rows[index])

    def reshape(self, *shape) -> LazyUniform:
        """The same uniforms in another shape (a view: what comparisons reveal through it, both see)."""
        views = [np.reshape(a, shape) for a in (self.lo, self.hi, self.atom, self.rows)]
        if any(not np.shares_memory(v, a) for v, a in zip(views, (self.lo, self.hi, self.atom))):
            raise ValueError("these uniforms cannot be reshaped in place")
        return LazyUniform(self.source, *views)

    def _compare(self, threshold, strict: bool) -> torch.Tensor:
        if isinstance(threshold, torch.Tensor):
            threshold = threshold.detach().cpu().double().numpy()
        t = np.broadcast_to(np.asarray(threshold, dtype=np.float64), self.shape)
        width = np.where(self.atom, 1.0, self.hi - self.lo)
        p_true = np.clip((t - self.lo) / width, 0.0, 1.0)
        out = p_true >= 1.0
        zero_atom = ~strict & ~self.atom & (t == 0.0) & (self.lo == 0.0)
        at_atom = self.atom & ((self.lo < t) if strict else (self.lo <= t))
        out = np.where(self.atom, at_atom, out)
        branching = np.nonzero(~self.atom & (((p_true > 0) & (p_true < 1)) | zero_atom))
        if branching[0].size:  # each a coin of two options, True first, drawn in order (a row may draw several)
            rows = self.rows[branching]
            picks = self.source.choose(rows, np.full(rows.size, 2))
            true = picks <= 0  # -1: a retired world takes the first option, unweighed
            zero = zero_atom[branching]  # u <= 0: only the generator's exact 0.0 passes
            p = np.where(zero, ZERO_ATOM, p_true[branching])
            np.multiply.at(self.source.weights, rows[picks >= 0], np.where(true, p, 1.0 - p)[picks >= 0])
            lo, hi, tt = self.lo[branching], self.hi[branching], t[branching]
            out[branching] = true
            # True: u in [lo, t), or at the atom 0.0; False: u in [t, hi), or, once u > 0 is known, from the smallest
            # positive lower end (so a second `u <= 0` does not branch again)
            self.lo[branching] = np.where(true, np.where(zero, 0.0, lo), np.where(zero, np.nextafter(0.0, 1.0), tt))
            self.hi[branching] = np.where(true, np.where(zero, 0.0, tt), hi)
            self.atom[branching] = true & zero
        # Deterministic outcomes still narrow nothing: u already lies wholly on one side.
        return torch.from_numpy(np.ascontiguousarray(out))

    def __lt__(self, threshold) -> torch.Tensor:
        return self._compare(threshold, strict=True)

    def __le__(self, threshold) -> torch.Tensor:
        return self._compare(threshold, strict=False)

    def __gt__(self, threshold) -> torch.Tensor:
        return ~self._compare(threshold, strict=False)

    def __ge__(self, threshold) -> torch.Tensor:
        return ~self._compare(threshold, strict=True)


class CoinsOnlySource(EnumeratingSource):
    """Every coin enumerated, categorical draws not (each takes its first possible token, weight 1): the
    exact law of whatever is decided before the draws, e.g. how many nodes a verifier accepts."""

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        return (probs > 0).to(torch.int8).argmax(-1)


def enumerate_law(
    run: Callable[[EnumeratingSource], Sequence[Hashable]], batch_size: int = 512,
    source_type: type[EnumeratingSource] = EnumeratingSource,
) -> dict[Hashable, float]:
    """Exact law of run's outcome: run(source) plays len(source trails) worlds, one outcome each."""
    law: dict[Hashable, float] = defaultdict(float)
    pending: list[list[int]] = [[]]
    while pending:
        trails, pending = pending[-batch_size:], pending[:-batch_size]
        source = source_type(trails)
        outcomes = run(source)
        if len(outcomes) != len(trails):
            raise ValueError(f"run returned {len(outcomes)} outcomes for {len(trails)} worlds")
        for outcome, weight in zip(outcomes, source.weights):
            law[outcome] += float(weight)
        pending.extend(source.branches())
    return dict(law)
