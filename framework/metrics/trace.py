"""What one request's decoding leaves behind for the metrics: per verify step, the depth drafted, the drafts
accepted and the tokens kept, and its clock. Every metric (framework.metrics.acceptance, .latency) is a
function of these traces, so each is defined once, on data a test can write by hand.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestTrace:
    accepted: tuple[int, ...]  # per step: drafted tokens accepted (the recovered / bonus token is not one)
    drafted: tuple[int, ...]  # per step: the depth of the tree offered (0: the step drafted nothing)
    emitted: tuple[int, ...]  # per step: tokens kept (accepted + 1, less what EOS or the budget cut at the end)
    first_tokens: int = 1  # tokens out before the first step (the prefill's)
    ttft_s: float | None = None  # request start to its first token
    e2e_s: float | None = None  # request start to its last token
    think_end: int | None = None  # output index of the end-of-thinking token (None: none in the output)
    thinking: bool = False  # the output starts inside a thinking span (a reasoning model, thinking on)

    def __post_init__(self) -> None:
        if not len(self.accepted) == len(self.drafted) == len(self.emitted):
            raise ValueError(f"a trace needs one accepted, drafted and emitted count per step, got "
                             f"{len(self.accepted)}, {len(self.drafted)}, {len(self.emitted)}")
        if any(a < 0 or d < 0 or e < 0 for a, d, e in zip(self.accepted, self.drafted, self.emitted)):
            raise ValueError("trace counts must be >= 0")

    @property
    def tokens(self) -> int:
        return self.first_tokens + sum(self.emitted)

    def steps(self) -> list[tuple[int, int, int, int]]:
        """(accepted, drafted, emitted, index of the step's first token in the output) per step."""
        out, start = [], self.first_tokens
        for a, d, e in zip(self.accepted, self.drafted, self.emitted):
            out.append((a, d, e, start))
            start += e
        return out

    @classmethod
    def of(cls, data: dict) -> RequestTrace:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def request_traces(steps, batch_size: int, outputs: list[list[int]], ttft_s: float | None = None,
                   e2e_s: float | None = None, think_end_id: int | None = None,
                   thinking: bool = False) -> list[RequestTrace]:
    """One trace per row of a generation: steps are the engine's StepStats (accepted, drafted, emitted and
    rows [B'] per step: a row that finished has left them), outputs each row's tokens. The rows of a batch
    share its clock."""
    per_row = [([], [], []) for _ in range(batch_size)]
    for step in steps:
        rows = step.rows.tolist() if step.rows is not None else list(range(batch_size))
        drafted = step.drafted.tolist() if step.drafted is not None else [0] * len(rows)
        emitted = step.emitted.tolist() if step.emitted is not None else [a + 1 for a in step.accepted.tolist()]
        for row, a, d, e in zip(rows, step.accepted.tolist(), drafted, emitted):
            for column, value in zip(per_row[row], (a, d, e)):
                column.append(int(value))
    return [RequestTrace(tuple(a), tuple(d), tuple(e), 1 if out else 0, ttft_s, e2e_s,
                         out.index(think_end_id) if think_end_id in out else None, thinking)
            for (a, d, e), out in zip(per_row, outputs)]
