"""Batch policies that engines ship: speculation sized by how many requests decode together.

- `DepthByBatch`: a depth per batch size (SGLang's batch-size-aware adaptive `speculative_num_steps`, and its
  AutoSpec proposal: the best steps fall as the batch grows), e.g. {1: 6, 4: 3, 16: 1, 32: 0}.
- `OffAbove`: plain decoding while more than `concurrency` requests decode (vLLM's
  `speculative_disable_by_batch_size`, SGLang's n-gram fallback above a batch size).
Each wraps another policy (None: speculation as configured) whose plan it caps; the wrapped policy (e.g. the goodput
controller, whose acceptance estimates are per request) still trims and observes. A batch's size is known to the
policy through start, select (rows leaving) and admit (requests joining): no clock, no coin, so laws stay exact.
"""

from __future__ import annotations

import torch

from framework.control.capped import Capped
from framework.core.policy import Policy


class BatchSized(Capped):
    """A policy that caps another's plan by the number of rows decoding."""

    def __init__(self, inner: Policy | None = None):
        super().__init__(inner)
        self.batch = 0

    def cap_at(self, batch: int) -> int | None:
        """The most levels a batch of this size may draft (None: no cap)."""
        raise NotImplementedError

    def cap(self) -> int | None:
        return self.cap_at(self.batch)

    def start(self, target, batch_size: int) -> None:
        self.batch = batch_size
        super().start(target, batch_size)

    def select(self, rows: torch.Tensor) -> None:
        self.batch = int(rows.numel())
        super().select(rows)

    def admit(self, count: int) -> None:
        self.batch += count
        super().admit(count)


class DepthByBatch(BatchSized):
    def __init__(self, depths: dict, inner: Policy | None = None):
        """depths: {batch size: most levels}; a batch takes the entry of the largest size not above it (0: plain)."""
        table = {int(size): int(depth) for size, depth in dict(depths).items()}
        if not table or min(table) != 1 or any(size < 1 or depth < 0 for size, depth in table.items()):
            raise ValueError(f"depths must map batch sizes >= 1, 1 among them, to depths >= 0; got {dict(depths)}")
        super().__init__(inner)
        self.depths = dict(sorted(table.items()))

    def cap_at(self, batch: int) -> int | None:
        return [depth for size, depth in self.depths.items() if size <= max(batch, 1)][-1]


class OffAbove(BatchSized):
    def __init__(self, concurrency: int, inner: Policy | None = None):
        """concurrency: the most rows that still speculate; more decode plainly."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
        super().__init__(inner)
        self.concurrency = concurrency

    def cap_at(self, batch: int) -> int | None:
        return 0 if batch > self.concurrency else None
