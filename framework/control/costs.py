"""What a step costs: the target's forward by node count and batch size, measured on the device at hand.

A target's cost table is measured once per (target, device, threads, batch size) through the Target role
(`forward_costs`) and cached in a JSON file (`$XDG_CACHE_HOME/speculum/forward_costs.json`), so a later
run on the same machine starts from it; between measured node counts it is interpolated linearly.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from framework.core import files

SIZES = (0, 1, 2, 4, 8, 16, 32, 64)  # node counts measured; trees beyond 64 are extrapolated


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "speculum" / "forward_costs.json"


@dataclass
class CostTable:
    """Seconds of one target forward by node count, at one batch size."""

    seconds: dict[int, float]

    def __post_init__(self) -> None:
        if 0 not in self.seconds or any(s <= 0 for s in self.seconds.values()):
            raise ValueError(f"a cost table needs a positive cost at 0 nodes and every other size, got {self.seconds}")

    def __call__(self, nodes: float) -> float:
        return piecewise(self.seconds, nodes)


@dataclass(frozen=True)
class StepCosts:
    """What each part of a step costs a method on one device at one batch size (a device profile's, or given):
    a policy sized by them reads no clock."""

    target: dict[int, float]  # tree nodes per row -> seconds of the target's forward in this method's runs
    draft: tuple[float, float]  # (per step, per level) seconds of a step that drafts
    verify: tuple[float, float]  # (plain step, per node) seconds of the target's laws and the verifier
    rest: float  # seconds per step of the rest (commits, state, emitting)

    def __post_init__(self) -> None:
        CostTable(self.target)  # a positive cost at 0 nodes and at every other size
        if min(*self.draft, *self.verify, self.rest) < 0:
            raise ValueError(f"step costs are seconds >= 0, got draft {self.draft}, verify {self.verify}, "
                             f"rest {self.rest}")


def piecewise(points: dict[float, float], x: float) -> float:
    """The broken line through `points` (x -> y) at x: linear between neighbours; beyond either end the end's
    slope goes on (one point: that value everywhere)."""
    xs = sorted(points)
    if len(xs) == 1:
        return points[xs[0]]
    for lo, hi in zip(xs, xs[1:]):
        if x <= hi:
            return points[lo] + (points[hi] - points[lo]) * (x - lo) / (hi - lo)
    lo, hi = xs[-2], xs[-1]
    return points[hi] + (points[hi] - points[lo]) * (x - hi) / (hi - lo)


def measured_costs(target, batch_size: int, cache: str | Path | None = None, sizes=SIZES) -> CostTable:
    """The target's cost table at this batch size: from the cache, or measured now and cached."""
    path = Path(cache) if cache is not None else default_cache()
    key = f"{target.cost_key()}/batch{batch_size}"
    stored = json.loads(path.read_text()) if path.exists() else {}
    if key not in stored:
        measured = {str(n): s for n, s in target.forward_costs(sizes).items()}
        stored = json.loads(path.read_text()) if path.exists() else {}  # another run may have written meanwhile
        stored[key] = measured
        files.write_json(path, stored)
    return CostTable({int(n): float(s) for n, s in stored[key].items()})
