"""From a proposer's own node scores to the probability that the target accepts the node, learned online.

Scores (a draft probability along the path, a match count's share) are binned by octaves per depth.
Two things are learnt from every verified node, both with decayed counts: per depth, how many nodes the
target accepted against how many the scores promised (a ratio that corrects a draft that is flat or
overconfident within a few steps), and per (depth, bin) the accepted fraction, which takes over as its
bin fills. Both are kept over every request so far (the prior of a new request) and per request of the
batch (requests differ: a code row accepts more than a prose row at the same score).
"""

from __future__ import annotations

import torch


class Calibration:
    def __init__(self, depths: int = 12, bins: int = 12, prior_weight: float = 4.0, row_weight: float = 4.0,
                 decay: float = 0.995, ratio_weight: float = 0.5):
        self.depths, self.bins = depths, bins
        self.prior_weight, self.row_weight, self.decay, self.ratio_weight = (prior_weight, row_weight, decay,
                                                                             ratio_weight)
        # decayed counts per (depth, bin): nodes accepted, nodes verified, scores summed; over every request
        # so far [D, K], and per row of this generation [B, D, K] (a row's own counts weigh twice)
        self.hits = torch.zeros(depths, bins, dtype=torch.float64)
        self.trials = torch.zeros(depths, bins, dtype=torch.float64)
        self.row_hits = torch.zeros(0, depths, bins, dtype=torch.float64)
        self.row_trials = torch.zeros(0, depths, bins, dtype=torch.float64)
        self.promised = torch.zeros(depths, bins, dtype=torch.float64)  # summed scores per bin
        self.row_promised = torch.zeros(0, depths, bins, dtype=torch.float64)

    def start(self, batch_size: int) -> None:
        self.row_hits = torch.zeros(batch_size, self.depths, self.bins, dtype=torch.float64)
        self.row_trials = torch.zeros_like(self.row_hits)
        self.row_promised = torch.zeros_like(self.row_hits)

    def select(self, rows: torch.Tensor) -> None:
        rows = rows.cpu()
        self.row_hits, self.row_trials, self.row_promised = (self.row_hits[rows], self.row_trials[rows],
                                                             self.row_promised[rows])

    def admit(self, count: int) -> None:
        """New requests: rows of their own, nothing seen yet."""
        fresh = torch.zeros(count, self.depths, self.bins, dtype=torch.float64)
        self.row_hits, self.row_trials, self.row_promised = (torch.cat([t, fresh]) for t in
                                                             (self.row_hits, self.row_trials, self.row_promised))

    def cells(self, scores: torch.Tensor, depth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """scores [B, N], depth [N] (1-based) -> (scores in [0, 1] as float64, depth index, bin), each [B, N]."""
        level = (depth.clamp(1, self.depths) - 1).expand(scores.shape)
        score = scores.double().cpu().clamp(1e-12, 1.0)
        return score, level, (-torch.log2(score)).floor().long().clamp(0, self.bins - 1)

    def value(self, scores: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        """[B, N] estimated probability that each node is accepted."""
        score, level, k = self.cells(scores, depth)
        rows = torch.arange(scores.shape[0])[:, None]
        # the depth's ratio of accepted to promised, over every request and then this row's
        w = self.ratio_weight  # in promised tokens: a few steps' nodes outweigh it
        ratio = (self.hits.sum(1) + w) / (self.promised.sum(1) + w)  # [D]
        row_ratio = (self.row_hits.sum(2) + w * ratio) / (self.row_promised.sum(2) + w)  # [B, D]
        guess = (score * row_ratio[rows, level]).clamp_max(1.0)  # [B, N]
        hits = self.hits[level, k] + self.row_hits[rows, level, k]
        trials = self.trials[level, k] + self.row_trials[rows, level, k]
        return (hits + self.prior_weight * guess) / (trials + self.prior_weight)

    def update(self, scores: torch.Tensor, depth: torch.Tensor, accepted: torch.Tensor,
               verified: torch.Tensor | None = None) -> None:
        """accepted [B, N] bool: which of the verified nodes the target accepted; verified [B] bool: the rows
        whose nodes were verified (None: all; a row kept from speculating teaches nothing)."""
        score, level, k = self.cells(scores, depth)
        counted = torch.ones_like(score) if verified is None else verified.cpu().double()[:, None].expand_as(score)
        hit, score = accepted.cpu().double() * counted, score * counted
        for counts in (self.hits, self.trials, self.promised):
            counts.mul_(self.decay)
        cell = (level * self.bins + k).flatten()
        row_cell = (torch.arange(scores.shape[0])[:, None] * self.depths * self.bins + level * self.bins + k).flatten()
        for counts, row_counts, add in ((self.hits, self.row_hits, hit), (self.trials, self.row_trials, counted),
                                        (self.promised, self.row_promised, score)):
            counts.view(-1).index_add_(0, cell, add.flatten())
            row_counts.view(-1).index_add_(0, row_cell, add.flatten())
