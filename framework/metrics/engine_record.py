"""One request's acceptance in the engine-neutral record the benchmarking tools read (AIPerf's
`SpecDecodeAcceptanceRecord`: engine, mean_acceptance_length, draft_acceptance_rate, acceptance_histogram,
num_accepted_draft_tokens, num_draft_tokens, num_spec_steps, num_spec_tokens, completion_tokens,
per_step_accepted, per_step_drafted), and the identities its validator holds it to.

Steps are those that drafted, as vLLM counts num_drafts (framework.metrics.acceptance.drafting_steps).
"""

from __future__ import annotations

from framework.metrics.acceptance import drafting_steps
from framework.metrics.engine_counters import EngineCounters
from framework.metrics.trace import RequestTrace

ENGINE = "speculum"


def acceptance_record(trace: RequestTrace, engine: str = ENGINE) -> dict:
    """The record of one of our requests: its counters' record (one definition with an engine's), with the per-step
    arrays an engine does not keep and we do."""
    steps = drafting_steps([trace])
    record = counters_record(EngineCounters.of_traces([trace]), engine, trace.tokens,
                             max((d for _, d in steps), default=0))
    return {**record, "per_step_accepted": [a for a, _ in steps], "per_step_drafted": [d for _, d in steps]}


def counters_record(counters: EngineCounters, engine: str, completion_tokens: int | None = None,
                    num_spec_tokens: int | None = None) -> dict:
    """The record of a request an engine decoded, from its counters (no per-step arrays: engines keep totals)."""
    return {"engine": engine,
            "mean_acceptance_length": counters.mean_acceptance_length or 1.0,
            "draft_acceptance_rate": counters.acceptance_rate or 0.0,
            "acceptance_histogram": counters.histogram(),
            "num_accepted_draft_tokens": counters.accepted, "num_draft_tokens": counters.draft_tokens,
            "num_spec_steps": counters.drafts, "num_spec_tokens": num_spec_tokens,
            "completion_tokens": completion_tokens, "per_step_accepted": None, "per_step_drafted": None}


def record_failures(record: dict) -> list[str]:
    """The record's integer identities, each failure in words (empty: all hold): histogram counts sum to the
    steps, the j-weighted sum is the accepted drafts, no more accepted than drafted, and the per-step arrays
    (when present) agree with the totals."""
    failures = []
    histogram = {int(j): n for j, n in record["acceptance_histogram"].items()}
    if any(j < 0 or n < 0 for j, n in histogram.items()):
        failures.append(f"negative histogram entry in {histogram}")
    if sum(histogram.values()) != record["num_spec_steps"]:
        failures.append(f"histogram counts sum to {sum(histogram.values())}, not to {record['num_spec_steps']} steps")
    if sum(j * n for j, n in histogram.items()) != record["num_accepted_draft_tokens"]:
        failures.append(f"histogram j-weighted sum {sum(j * n for j, n in histogram.items())} != "
                        f"{record['num_accepted_draft_tokens']} accepted")
    if record["num_accepted_draft_tokens"] > record["num_draft_tokens"]:
        failures.append(f"{record['num_accepted_draft_tokens']} accepted of {record['num_draft_tokens']} drafted")
    accepted, drafted = record.get("per_step_accepted"), record.get("per_step_drafted")
    if accepted is not None and drafted is not None:
        if not len(accepted) == len(drafted) == record["num_spec_steps"]:
            failures.append(f"per-step arrays of {len(accepted)} and {len(drafted)} "
                            f"for {record['num_spec_steps']} steps")
        if sum(accepted) != record["num_accepted_draft_tokens"] or sum(drafted) != record["num_draft_tokens"]:
            failures.append("per-step arrays do not sum to the totals")
        if any(a > d for a, d in zip(accepted, drafted)):
            failures.append("a step accepted more than it drafted")
    return failures
