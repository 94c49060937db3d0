"""The cost model: a run's time from its step trace and a device profile.

A run is its start (the prompt's prefill, the proposer's own) and its steps; a step costs its drafting (by the
levels it drafted), its verification forward (by rows, context and tree nodes), its target laws and
verification (by nodes) and the rest (commits, state). The trace says what each step was (engine/loop.py's
StepStats, read by `step_records`); the profile says what each part costs on a device
(framework/control/device_profile.py). The same trace on another profile is that run projected onto that device:
the acceptance is the method's and the target's, the seconds the device's.

Where only some rows draft (a packed forward, framework/lm/packing.py) the tree's nodes count in the share of
rows that drafted: the profile's forward table is of every row verifying the same tree. A proposer's side rows are
positions of each row, as nodes are. A method's forwards are the table's times its measured scale (the profile's
`target_scale`: on a CPU the drafter's weights evict the target's from the caches between forwards).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from framework.control.device_profile import DeviceProfile


@dataclass(frozen=True)
class StepRecord:
    """One step of a run, as the cost model reads it."""

    rows: int  # rows decoding
    nodes: int  # tree nodes verified per drafting row (0: a plain step)
    levels: int  # the deepest level drafted (0: none)
    context: float  # a row's context before the step (mean over rows): its prompt and its tokens so far
    drafting: int | None = None  # rows offered the tree (None: all)
    # a proposer's own positions per row in the forward (lookahead's window: framework/core/side_rows.py)
    side_rows: int = 0

    def __post_init__(self) -> None:
        if self.rows < 1 or self.nodes < 0 or self.levels < 0 or self.context < 0 or self.side_rows < 0:
            raise ValueError(f"a step record needs rows >= 1 and counts >= 0, got {self}")

    @property
    def nodes_per_row(self) -> float:
        return self.nodes * (self.rows if self.drafting is None else self.drafting) / self.rows


STEP_FIELDS = tuple(f.name for f in fields(StepRecord))


def steps_of(columns: dict) -> list[StepRecord]:
    """A run record's step trace (one list per field, as experiments.compare stores it) as StepRecords."""
    if missing := sorted(set(STEP_FIELDS) - columns.keys()):
        raise ValueError(f"a step trace lacks {missing}")
    return [StepRecord(**dict(zip(STEP_FIELDS, values))) for values in zip(*(columns[k] for k in STEP_FIELDS))]


@dataclass(frozen=True)
class Prediction:
    """Seconds of a run by part."""

    start_s: float
    draft_s: float
    target_s: float
    verify_s: float
    other_s: float

    @property
    def seconds(self) -> float:
        return self.start_s + self.draft_s + self.target_s + self.verify_s + self.other_s

    def split(self) -> dict[str, float]:
        """The parts in the names of a run's measured split (experiments.compare's records)."""
        return {"draft_s": self.draft_s, "target_s": self.target_s, "verify_s": self.verify_s,
                "other_s": self.other_s}


def predict(profile: DeviceProfile, method: str, sampling: str, prompt_tokens: Sequence[int],
            steps: Sequence[StepRecord]) -> Prediction:
    """The predicted seconds of a run of `method` under `sampling` whose rows had these prompts and steps."""
    batch = len(prompt_tokens)
    if batch < 1:
        raise ValueError("a run has at least one prompt")
    start = profile.prefill_s(method, batch, sum(prompt_tokens) / batch)
    draft = target = verify = other = 0.0
    for step in steps:
        draft += profile.draft_s(method, sampling, step.rows, step.levels)
        target += profile.forward_s(step.rows, step.context, step.nodes_per_row + step.side_rows) * \
            profile.scale(method, sampling, step.rows)
        verify += profile.verify_s(method, sampling, step.rows, step.nodes_per_row)
        other += profile.other_s(method, step.rows)
    return Prediction(start, draft, target, verify, other)


def step_records(steps: Sequence, prompt_tokens: Sequence[int], first_tokens: int = 1) -> list[StepRecord]:
    """The steps (engine.StepStats, with `emitted` filled by generate) of a run whose rows had these prompts:
    each row's context grows by what it kept (the prefill's first token before the first step)."""
    context = [float(n + first_tokens) for n in prompt_tokens]
    out = []
    for step in steps:
        rows = list(range(len(prompt_tokens))) if step.rows is None else [int(r) for r in step.rows]
        drafted = None if step.drafted is None else [int(d) for d in step.drafted]
        offered = None if drafted is None else sum(d > 0 for d in drafted)
        out.append(StepRecord(len(rows), int(step.nodes), max(drafted, default=0) if drafted else 0,
                              sum(context[r] for r in rows) / len(rows),
                              None if offered is None or offered == len(rows) else offered, int(step.side_rows)))
        if step.emitted is None:
            raise ValueError("a step without its emitted counts (generate fills them): its rows' contexts are unknown")
        for r, kept in zip(rows, step.emitted.tolist()):
            context[r] += kept
    return out
