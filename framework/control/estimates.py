"""Online estimates the goodput policy keeps: a line fitted to what the steps took, and how often a level
of a tree was accepted."""

from __future__ import annotations

import torch


class LineFit:
    """y = a + b x by decayed least squares over what the steps showed. While x does not vary (never did, or the
    steps that varied it have decayed away): b = `slope` and a the rest, or, without a slope, b alone."""

    def __init__(self, decay: float = 0.95, slope: float | None = None):
        self.decay, self.slope, self.sums = decay, slope, [0.0] * 5  # n, sum x, sum x^2, sum y, sum xy
        self.a = self.b = 0.0

    def add(self, x: float, y: float) -> None:
        x, y = float(x), float(y)
        n, sx, sxx, sy, sxy = (self.decay * v + d for v, d in zip(self.sums, (1.0, x, x * x, y, x * y)))
        self.sums = [n, sx, sxx, sy, sxy]
        det = n * sxx - sx * sx
        if det > 1e-6 * n * sxx:
            self.b = (n * sxy - sx * sy) / det
            self.a = (sy - self.b * sx) / n
        elif self.slope is not None:
            self.a, self.b = (sy - self.slope * sx) / n, self.slope
        else:  # one x so far: all of y is per unit of x
            self.a, self.b = (0.0, sy / sx) if sx > 0 else (sy / n, 0.0)

    def __call__(self, x):
        """a + b x, never below 0 (x an int or a tensor)."""
        if isinstance(x, torch.Tensor):
            return (self.a + self.b * x).clamp_min(0.0)
        return max(0.0, self.a + self.b * x)


class LevelAcceptance:
    """How often a step that drafted d levels got its level d accepted: decayed counts over every request so
    far (slow, the prior) and per request of the batch (no decay: a request is short). A level never drafted
    yet is guessed from the one above it, as if each level were accepted as often as the first (a geometric
    law), so a proposer that is accepted often is tried deeper."""

    def __init__(self, depths: int, prior_weight: float = 6.0, decay: float = 0.99, first_guess: float = 0.6):
        self.prior_weight, self.decay, self.first_guess = prior_weight, decay, first_guess
        self.hits = torch.zeros(depths, dtype=torch.float64)
        self.trials = torch.zeros(depths, dtype=torch.float64)
        self.row_hits = self.row_trials = torch.zeros(0, depths, dtype=torch.float64)

    def start(self, batch_size: int) -> None:
        self.row_hits = torch.zeros(batch_size, self.hits.numel(), dtype=torch.float64)
        self.row_trials = torch.zeros_like(self.row_hits)

    def select(self, rows: torch.Tensor) -> None:
        self.row_hits, self.row_trials = self.row_hits[rows.cpu()], self.row_trials[rows.cpu()]

    def admit(self, count: int) -> None:
        """New requests: rows of their own, nothing seen yet."""
        self.row_hits = torch.cat([self.row_hits, self.row_hits.new_zeros(count, self.row_hits.shape[1])])
        self.row_trials = torch.cat([self.row_trials, self.row_trials.new_zeros(count, self.row_trials.shape[1])])

    def expected(self) -> torch.Tensor:
        """[B, D] each request's expected tokens from level d; never more deep than shallow."""
        prior, guess = [], self.first_guess
        for d in range(self.hits.numel()):  # over every request: one pseudo-step of the guess
            prior.append((float(self.hits[d]) + guess) / (float(self.trials[d]) + 1.0))
            guess = prior[-1] * prior[0]
        prior = torch.tensor(prior, dtype=torch.float64)
        rate = (self.row_hits + self.prior_weight * prior) / (self.row_trials + self.prior_weight)
        return rate.cummin(1).values

    def update(self, accepted: torch.Tensor, depth: int, drafted: torch.Tensor | None = None) -> None:
        """accepted [B] nodes accepted per row at a step that drafted `depth` levels; drafted [B] bool: the rows
        that were offered the tree (None: all)."""
        counted = torch.ones(accepted.shape[0], 1, dtype=torch.float64) if drafted is None else \
            drafted.cpu().double()[:, None]  # [B, 1]
        got = (accepted[:, None] >= torch.arange(1, depth + 1)).double() * counted  # [B, d]
        self.hits.mul_(self.decay)
        self.trials.mul_(self.decay)
        self.hits[:depth] += got.sum(0)
        self.trials[:depth] += counted.sum()
        self.row_hits[:, :depth] += got
        self.row_trials[:, :depth] += counted
