"""A device profile: what each part of a decoding step costs on one device, for one target and its proposers.

Measured by `python -m experiments.profile_device` (the clocks are the engine's own, so a profile and a run split
time the same way) and read by the cost model (framework/control/cost_model.py). Every table is nested by
numbers (batch size, context, nodes, levels) and interpolated along each (framework/control/costs.py: linear
between measured points, the end's slope beyond them); names (methods, samplings) are looked up exactly.

A profile built from published figures instead of clocks (framework/control/roofline.py) says so in `kind`:
its predictions are projections, never measurements.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from framework.control.costs import StepCosts, piecewise
from framework.core import files

PLAIN = "plain"  # the method name of decoding without a proposer


@dataclass
class DeviceProfile:
    hardware: dict  # the machine, threads and library versions it was measured with
    target: str  # the target the forward table is of
    forward: dict  # batch -> context -> nodes -> seconds of one verification forward (every row its root + nodes)
    prefill: dict  # method -> batch -> prompt tokens -> seconds of a generation's start (target and proposer prefill)
    # method -> sampling -> batch -> levels drafted -> seconds of a step's drafting (0: a plain step's books)
    draft: dict
    verify: dict  # method -> sampling -> batch -> nodes -> seconds of a step's target laws and verification
    other: dict  # method -> batch -> seconds per step of the rest (commits, state, emitting)
    target_scale: dict = field(default_factory=dict)  # method -> sampling -> batch -> the target's forwards in that
    # method's runs over the forward table's (on a CPU a drafter's weights evict the target's from the caches);
    # 1 if absent
    kind: str = "measured"  # or "projection"
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ("measured", "projection"):
            raise ValueError(f"a profile's kind is 'measured' or 'projection', got {self.kind!r}")
        self.forward, self.verify = numeric(self.forward), numeric(self.verify)
        self.prefill, self.other = numeric(self.prefill), numeric(self.other)
        self.draft, self.target_scale = numeric(self.draft), numeric(self.target_scale)

    # ---- lookups ----------------------------------------------------------------------------------

    def forward_s(self, batch: float, context: float, nodes: float) -> float:
        return interpolate(self.forward, batch, context, nodes)

    def prefill_s(self, method: str, batch: float, tokens: float) -> float:
        return interpolate(named(self.prefill, method, "prefill"), batch, tokens)

    def draft_s(self, method: str, sampling: str, batch: float, levels: int) -> float:
        if method == PLAIN:
            return 0.0
        by_sampling = named(self.draft, method, "draft")
        return interpolate(named(by_sampling, sampling, f"draft[{method}]"), batch, levels)

    def verify_s(self, method: str, sampling: str, batch: float, nodes: float) -> float:
        by_sampling = named(self.verify, method, "verify")
        return interpolate(named(by_sampling, sampling, f"verify[{method}]"), batch, nodes)

    def scale(self, method: str, sampling: str, batch: float) -> float:
        """The target's forwards in `method`'s runs against the table's (1 where the profile did not measure it)."""
        by_sampling = self.target_scale.get(method, {})
        return interpolate(by_sampling[sampling], batch) if sampling in by_sampling else 1.0

    def other_s(self, method: str, batch: float) -> float:
        return interpolate(named(self.other, method, "other"), batch)

    def step_costs(self, method: str, sampling: str, batch: int, context: float | None = None) -> StepCosts:
        """What a step of `method` costs at `batch` rows (context: tokens per row; None: the middle of the forward
        table's), as a policy decides by them: the target's forward by nodes (the method's scale applied), drafting
        and verification as lines, the rest per step."""
        by_context = self.forward[min(self.forward, key=lambda b: abs(b - batch))]
        contexts = sorted(by_context)
        context = contexts[len(contexts) // 2] if context is None else context
        scale = self.scale(method, sampling, batch)
        nodes = sorted(by_context[contexts[0]])
        target = {int(n): self.forward_s(batch, context, n) * scale for n in nodes}
        per_level = self.draft_s(method, sampling, batch, 2) - self.draft_s(method, sampling, batch, 1)
        per_node = self.verify_s(method, sampling, batch, 1) - self.verify_s(method, sampling, batch, 0)
        plain = self.verify_s(method, sampling, batch, 0)
        return StepCosts(target, (max(self.draft_s(method, sampling, batch, 1) - per_level, 0.0), max(per_level, 0.0)),
                         (plain, max(per_node, 0.0)), self.other_s(method, batch))

    # ---- a file ------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        files.write_json(Path(path), asdict(self))

    @classmethod
    def load(cls, path: str | Path) -> DeviceProfile:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no device profile at {path} (python -m experiments.profile_device writes one)")
        data = files.read_json(path)  # a torn or hand-broken file is named with where it breaks
        wanted = {"hardware", "target", "forward", "prefill", "draft", "verify", "other"}
        if not isinstance(data, dict):
            raise ValueError(f"{path} is not a device profile: it holds a JSON {type(data).__name__}, not an object")
        if missing := sorted(wanted - data.keys()):
            raise ValueError(f"{path} is not a device profile: it lacks {missing}")
        return cls(**data)


def numeric(table):
    """JSON's string keys back to numbers where they are numbers (names stay names); leaves as floats."""
    if not isinstance(table, dict):
        return float(table)
    out = {}
    for key, value in table.items():
        try:
            key = int(key) if str(key).lstrip("-").isdigit() else float(key)
        except ValueError:
            pass
        out[key] = numeric(value)
    return out


def interpolate(table, *xs: float) -> float:
    """table nested by numbers, one level per x: the broken line along each (a single point: its value)."""
    if not xs:
        if isinstance(table, dict):
            raise ValueError(f"a profile table is deeper than the lookup: {sorted(table)[:5]}")
        return float(table)
    if not isinstance(table, dict) or not table:
        raise ValueError(f"a profile table ends before the lookup ({len(xs)} more keys)")
    x, rest = xs[0], xs[1:]
    return piecewise({k: interpolate(sub, *rest) for k, sub in table.items()}, x)


def named(table: dict, name: str, what: str):
    """table[name], or an error naming what the profile has."""
    if name in table:
        return table[name]
    raise ValueError(f"the device profile's {what} table has no {name!r} (it has {sorted(map(str, table))}): "
                     f"profile it (python -m experiments.profile_device 'methods=[..., {name}]')")
