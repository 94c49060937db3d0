"""experiments.compare's tables: cells from the records (each row's figures by framework.metrics' definitions,
with device profiles its predicted and projected speedups) and compare.md's sections. Beside it: what a run writes
(compare_outputs), its plots (compare_plots), publishing a table and merging a sweep (compare_publish).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from framework.control.cost_model import Prediction, predict, steps_of
from framework.control.device_profile import PLAIN, DeviceProfile
from framework.metrics.acceptance import acceptance_summary
from framework.metrics.engine_counters import EngineCounters
from framework.metrics.latency import QUANTILES, latency_summary
from framework.metrics.trace import RequestTrace
from measurement.peers.report import engines_side_by_side

SPLIT = ("draft_s", "target_s", "verify_s", "other_s")
FIXED = "fixed"  # the policy of speculation as configured (generate's policy=None); records before the axis had it
PERCENTILES = tuple(f"p{q}" for q in QUANTILES)  # framework.metrics.latency's, as the csv's and tables' columns
CLOCKS = ("ttft", "tpot", "e2e")
PREDICTION, PROJECTION = "predicted", "projected"  # a row's figures from this machine's profile, from another device's
PREDICTED = "predicted speedup (error)"  # this machine's profile's prediction beside the measured speedup
PROJECTED = "projected speedup"  # experiment.project's profile (another device, or a roofline projection)


def aggregate(methods: list[str], samplings, categories: list[str], records: Iterable[dict],
              policies=(FIXED,), batches=(1,), profiles: dict[str, DeviceProfile] | None = None) -> list[dict]:
    """One row per (method, policy, sampling, category, batch) from the run records, in that order (batch
    innermost); a record without a policy or batch field is of the fixed policy at batch size 1. profiles: name ->
    device profile; each row gets its <name>_speedup and seconds from it (framework/control/cost_model.py): "predicted"
    is this machine's (with the error against the clock), "projected" another device's."""
    runs, checks, plains = defaultdict(list), {}, {}
    for r in records:
        if r["id"].startswith("run/"):
            runs[r["method"], r.get("policy", FIXED), r["sampling"], r["category"], r.get("batch", 1)].append(r)
        elif r["id"].startswith("check/"):
            checks[r["method"], r["sampling"]] = r
        elif r["id"].startswith("plain/"):
            plains[r["id"]] = r
    keys = [(m, p, s, c, b) for m in methods for p in policies for s in samplings for c in categories for b in batches]
    ran = {(k[0], k[1]) for k in runs}
    # the check ran the method as configured: shown on its fixed rows, or on its first policy's where fixed did not run
    checked = {m: next((p for p in [FIXED, *policies] if (m, p) in ran), FIXED) for m in methods}
    rows = []
    for key in keys:
        method, policy, sampling = key[:3]
        check = checks.get((method, sampling), {}) if policy == checked[method] else {}
        row = cell_row(runs.get(key, []), check, *key)
        for name, profile in (profiles or {}).items():
            row.update(predicted(runs.get(key, []), plains, profile, name))
        rows.append(row)
    return rows


def predicted(cell: list[dict], plains: dict[str, dict], profile: DeviceProfile, name: str = PREDICTION) -> dict:
    """The cell's seconds as the profile predicts them from its runs' step traces, and its plain decoding's from
    theirs: the <name>_speedup, each part's seconds, and for this machine's profile (PREDICTION) the errors of the
    speedup and of the seconds against the clock. None where a run has no trace (transformers' and peer engines'
    rows)."""
    ok = [r for r in cell if "error" not in r]
    pairs = [(r, plains.get(r.get("plain_id"))) for r in ok]
    if not ok or any("step_trace" not in r or p is None or "step_trace" not in p for r, p in pairs):
        return {f"{name}_speedup": None,
                **({"prediction_error": None, "seconds_error": None} if name == PREDICTION else {})}
    mine = [predict_record(profile, r, r["method"]) for r, _ in pairs]
    plain = [predict_record(profile, p, PLAIN) for _, p in pairs]
    seconds, plain_s = sum(m.seconds for m in mine), sum(p.seconds for p in plain)
    out = {f"{name}_s": seconds, f"{name}_plain_s": plain_s, f"{name}_speedup": plain_s / seconds,
           f"{name}_split": {k: sum(m.split()[k] for m in mine) for k in SPLIT},
           f"{name}_start_s": sum(m.start_s for m in mine), f"{name}_kind": profile.kind}
    if name == PREDICTION:  # the speedup's error: what transfers (a shared machine's speed drifts between the
        # profile and the run, and moves every row's seconds alike: seconds_error shows it)
        measured, measured_plain = sum(r["seconds"] for r in ok), sum(r["plain_seconds"] for r in ok)
        out.update(prediction_error=(plain_s / seconds) / (measured_plain / measured) - 1,
                   seconds_error=seconds / measured - 1)
    return out


def predict_record(profile: DeviceProfile, record: dict, method: str) -> Prediction:
    return predict(profile, method, record["sampling"], record["prompt_tokens"], steps_of(record["step_trace"]))


def cell_row(cell: list[dict], check: dict, method: str, policy: str, sampling: str, category: str, batch: int) -> dict:
    ok = [r for r in cell if "error" not in r]
    errors = sorted({r["error"] for r in cell if "error" in r})
    seconds, plain = sum(r["seconds"] for r in ok), sum(r["plain_seconds"] for r in ok)
    tokens, forwards = sum(r["new_tokens"] for r in ok), sum(r["forwards"] for r in ok)
    row_forwards = sum(r["forwards"] * r.get("batch", 1) for r in ok)  # a forward of B rows: B rows' steps
    plain_forwards = sum(r.get("plain_forwards", 0) for r in ok)
    steps, accepted = sum(r.get("steps", 0) for r in ok), sum(r.get("accepted", 0) for r in ok)
    split = {k: sum(r.get("split", {}).get(k, 0.0) for r in ok) for k in SPLIT}
    loop = sum(split.values())
    greedy = [r for r in ok if r.get("same_as_plain") is not None]
    same = sum(r.get("identical_rows", int(r["same_as_plain"])) for r in greedy)  # rows equal to plain's
    return {
        "method": method, "policy": policy, "sampling": sampling, "category": category, "batch": batch,
        "prompts": sum(r.get("batch", 1) for r in ok),  # decoded: B per timed run
        "tokens_per_forward": tokens / row_forwards if row_forwards else None,  # per row: B rows share a forward
        "speedup": plain / seconds if seconds else None,
        # one forward of the method in forwards of the baseline: the speedup is at most
        # tokens per forward / step cost
        "step_cost": (seconds / forwards) / (plain / plain_forwards) if forwards and plain and plain_forwards else None,
        "tokens_per_s": tokens / seconds if seconds else None,  # every row's tokens
        "mean_accepted": accepted / steps if steps else None,  # per step of a row
        "greedy_identical": f"{same}/{sum(r.get('batch', 1) for r in greedy)}" if greedy else None,
        "lossless_check": check_verdict(check),
        "check_samples": check.get("samples"), "check_detectable_tv": check.get("detectable_tv"),
        "check_p": check.get("g_test_p"),
        **{f"{k[:-2]}_frac": (split[k] / loop if loop else None) for k in SPLIT},
        "seconds": seconds, "plain_seconds": plain, "errors": "; ".join(errors) or None,
        "accepted_hist": {str(k): v for k, v in
                          sorted(Counter(a for r in ok for a in r.get("accepted_counts", [])).items())},
        "plain_tokens_per_s": tokens / plain if plain else None,  # the baseline's, on the same prompts
        **trace_metrics([RequestTrace.of(t) for r in ok for t in r.get("traces", [])]),
        **engine_metrics(ok),
    }


def engine_metrics(ok: list[dict]) -> dict:
    """The cell's speculative-decoding counters as an engine keeps them: a peer engine's own (its records carry
    them), ours read off the traces; a peer's pooled length and marginals come from its counters, by our
    definitions (framework.metrics.engine_counters)."""
    peer = [EngineCounters.of(r["counters"]) for r in ok if "counters" in r]
    counters = (sum(peer, EngineCounters()) if peer
                else EngineCounters.of_traces([RequestTrace.of(t) for r in ok for t in r.get("traces", [])]))
    out = {"engine_counters": json.loads(json.dumps(counters.summary()))}  # keys as compare.json has them
    if peer:
        out.update(accepted_length_pooled=counters.mean_acceptance_length, marginal=counters.marginal())
    return out


def trace_metrics(traces: list[RequestTrace]) -> dict:
    """framework.metrics over a cell's requests: both accepted lengths, per-position rates, the checks' verdict,
    the thinking split and latency percentiles (flat, for the csv), and the whole summaries (for the profile)."""
    acceptance, latency = acceptance_summary(traces), latency_summary(traces)
    thinking = acceptance["thinking"] or {}
    flat = {f"{k}_{q}": (latency[f"{k}_s"] or {}).get(q) for k in CLOCKS for q in PERCENTILES}
    return {"accepted_length_pooled": acceptance["accepted_length_pooled"],
            "accepted_length_per_request": acceptance["accepted_length_per_request"],
            "marginal": acceptance["marginal"], "conditional": acceptance["conditional"],
            "consistency": ("ok" if not acceptance["consistency_failures"]
                            else "; ".join(acceptance["consistency_failures"][:3]))
            if acceptance["drafting_steps"] else None,
            "thinking_length": thinking.get("thinking"), "answer_length": thinking.get("answer"),
            **flat, "acceptance": json.loads(json.dumps(acceptance)),
            "latency": latency}  # keys as compare.json has them


def check_verdict(check: dict) -> str | None:
    if not check:
        return None
    if "error" in check:
        return f"error: {check['error']}"
    return "pass" if check["passes"] else "FAIL"


def fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


BY_CATEGORY = "### By category"
BY_METHOD = "### By method (all categories)"
SIDE_BY_SIDE = "### Policies side by side (all categories)"


def policies_side_by_side(summary: list[dict]) -> str:
    """Where a method ran under several policies: one row per method (batch size 1), each (sampling, policy)'s
    speedup, beside the fixed policy's in brackets its projected speedup where the run had experiment.project; the
    greedy identity of every policy and the lossless checks (of the method as configured). Else nothing."""
    policies = list(dict.fromkeys(r.get("policy", FIXED) for r in summary))
    ran = defaultdict(set)
    for r in summary:
        ran[r["method"]].add(r.get("policy", FIXED))
    if max((len(p) for p in ran.values()), default=0) < 2:  # no method under two policies: nothing side by side
        return ""
    cells = {(r["method"], r["sampling"], r.get("policy", FIXED)): r for r in summary if r.get("batch", 1) == 1}
    samplings = list(dict.fromkeys(s for _, s, _ in cells))
    projected = any(r.get("projected_speedup") is not None for r in cells.values())

    def speedup(r: dict | None) -> str:  # a projection beside the fixed policy's only: a sizing policy decided by
        if r is None or r["speedup"] is None:  # this device's costs, and would decide otherwise on another
            return "-"
        shown = r.get("policy", FIXED) == FIXED and r.get("projected_speedup") is not None
        return f"{fmt(r['speedup'])}x" + (f" ({fmt(r['projected_speedup'])}x)" if shown else "")

    head = ["method", *(f"{s}: {p}" for s in samplings for p in policies), "greedy identical",
            "lossless check (as configured)"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(samplings) * len(policies)) + "---|---|"]
    for method in dict.fromkeys(m for m, _, _ in cells):
        rows = {(s, p): cells.get((method, s, p)) for s in samplings for p in policies}
        greedy = ", ".join(r["greedy_identical"] for r in rows.values() if r and r["greedy_identical"]) or "-"
        shown = {s: [check_cell(r) for r in (rows[s, p] for p in policies) if r and check_cell(r) != "-"]
                 for s in samplings}
        checks = "; ".join(f"{s}: {found[0]}" for s, found in shown.items() if found) or "-"
        lines.append("| " + " | ".join([method, *(speedup(r) for r in rows.values()), greedy, checks]) + " |")
    note = (" Speedups against plain decoding in the same run; in brackets, the fixed policy's run projected onto "
            "experiment.project's device.") if projected else " Speedups against plain decoding in the same run."
    return f"{SIDE_BY_SIDE}\n\n{note.strip()}\n\n" + "\n".join(lines) + "\n\n"


def markdown(result: dict) -> str:
    """The summary over all categories, then every cell (BY_CATEGORY); the README takes the first. The policy
    and batch columns appear when a run used them (a default run's table is as it was)."""
    every = result["summary"] + result["rows"]
    shown = [c for c in MD_COLUMNS if c.header not in OPTIONAL or OPTIONAL[c.header](every)]
    text = policies_side_by_side(result["summary"]) + BY_METHOD + "\n\n" + cell_table(result["summary"], shown)
    text += against_batch(result["summary"]) + metrics_table(result["summary"])
    text += engines_side_by_side(result["summary"], ((result.get("config") or {}).get("experiment") or {}).get("vllm"))
    if result.get("skipped"):
        text += ("\nSkipped (do not run on this target): "
                 + "; ".join(f"{k} ({v})" for k, v in result["skipped"].items()) + "\n")
    text += "".join(f"\n{note}\n" for note in result.get("notes", []))
    return text + f"\n{BY_CATEGORY}\n\n" + cell_table(result["rows"], shown) + configuration(result)


CONFIGURATION = "### Configuration"


def configuration(result: dict) -> str:
    """What produced the tables: methods (resolved settings, draft vocabulary), samplings, the workload and its
    rendering, batch sizes, policies, hardware and versions; nothing when the result lacks them (a merge)."""
    config = result.get("config")
    if not config:
        return ""
    exp, settings = config["experiment"], result.get("settings", {})
    lines = [f"- command: `{result.get('command') or '(from Python)'}`",
             f"- target: `{json.dumps(config['target'])}` (vocabulary {settings.get('target_vocabulary', '-')})",
             f"- workload: `{json.dumps(result.get('workload', {}))}`",
             f"- samplings: `{json.dumps(result.get('samplings', exp['samplings']))}`",
             f"- batch sizes {exp['batch_sizes']}, policies {exp['policies']}, max_new_tokens {exp['max_new_tokens']}, "
             f"baseline {result.get('baseline')}, seed {config['seed']}, threads {exp['num_threads']}",
             f"- hardware and versions: `{json.dumps(result.get('hardware', {}))}`; transformers "
             f"{settings.get('transformers', '-')}, torch {settings.get('torch', '-')}"]
    for name, method in settings.get("methods", {}).items():
        lines.append(f"- {name}: draft vocabulary {method['draft_vocabulary'] or '-'}; "
                     f"`{json.dumps(method['config'])}`")
    for name, peer in (settings.get("peers") or {}).items():
        lines.append(f"- {name}: vLLM's worker (`{json.dumps(peer['versions'])}`, one core); speculative_config "
                     f"`{json.dumps(peer['speculative_config'])}`")
    return f"\n{CONFIGURATION}\n\n" + "\n".join(lines) + "\n"


ACCEPTANCE = "### Acceptance by definition and latency (all categories)"
AGAINST_BATCH = "### Throughput against batch size (all categories)"
POSITIONS = 5  # per-position rates shown in the table (every position is in compare.json and the profiles)


def rates(values: list | None) -> str:
    shown = [fmt(v) for v in (values or [])[:POSITIONS]]
    return " ".join(shown) + (" ..." if values and len(values) > POSITIONS else "") or "-"


def milliseconds(value) -> str:
    return fmt(value and 1000 * value, 1)


def metrics_table(summary: list[dict]) -> str:
    """Per (method, policy, sampling, batch): both accepted lengths, per-position rates, the consistency checks,
    the thinking split when there was one, and latency percentiles."""
    thinking = any(r.get("thinking_length") is not None for r in summary)
    head = ["method", "sampling", "batch", "accepted length pooled", "per request", "marginal by position",
            "conditional by position", "checks", *(["thinking / answer"] if thinking else []),
            *(f"{k} ms {'/'.join(q.upper() for q in PERCENTILES)}" for k in ("TTFT", "TPOT"))]
    lines = ["| " + " | ".join(head) + " |",
             "|---|---|---:|---:|---:|---|---|---|" + ("---:|" if thinking else "") + "---|---|"]
    for r in summary:
        latency = [" / ".join(milliseconds(r.get(f"{k}_{q}")) for q in PERCENTILES) for k in ("ttft", "tpot")]
        split = [f"{fmt(r.get('thinking_length'))} / {fmt(r.get('answer_length'))}"] if thinking else []
        lines.append("| " + " | ".join([series(r), r["sampling"], str(r.get("batch", 1)),
                                        fmt(r.get("accepted_length_pooled")), fmt(r.get("accepted_length_per_request")),
                                        rates(r.get("marginal")), rates(r.get("conditional")),
                                        r.get("consistency") or "-", *split, *latency]) + " |")
    note = ("Accepted length pooled: 1 + accepted / drafting steps over every step (vLLM, SGLang, AIPerf); "
            "per request: the mean of each request's own (SpecForge). Marginal: P(first i drafts accepted); "
            "conditional: P(i | the first i - 1, and i drafted). Checks: pooled = 1 + sum of marginals (0.02), "
            "marginals never increase, every step keeps its accepted drafts + 1. TTFT and TPOT over requests "
            "(a batch's rows share its clock).")
    return f"\n{ACCEPTANCE}\n\n" + "\n".join(lines) + f"\n\n{note}\n"


def against_batch(summary: list[dict]) -> str:
    """With several batch sizes: per method, policy and sampling, tokens per second (every row's) and speedup
    over the baseline of the same batch, one column per batch size; else nothing."""
    batches = sorted({r.get("batch", 1) for r in summary})
    if len(batches) < 2:
        return ""
    cells = {(series(r), r["sampling"], r.get("batch", 1)): r for r in summary}
    lines = ["| method | sampling | " + " | ".join(f"B={b}: tokens/s (speedup)" for b in batches) + " |",
             "|---|---|" + "---:|" * len(batches)]
    baseline = {}
    for (_, sampling, batch), r in cells.items():
        baseline.setdefault((sampling, batch), r.get("plain_tokens_per_s"))
    keys = list(dict.fromkeys((m, s) for m, s, _ in cells))
    for method, sampling in [("baseline", s) for s in dict.fromkeys(s for _, s in keys)] + keys:
        values = []
        for b in batches:
            if method == "baseline":
                values.append(fmt(baseline.get((sampling, b)), 1))
                continue
            r = cells.get((method, sampling, b))
            values.append(f"{fmt(r['tokens_per_s'], 1)} ({fmt(r['speedup'])}x)" if r and r["speedup"] is not None
                          else "-")
        lines.append("| " + " | ".join([method, sampling, *values]) + " |")
    return f"\n{AGAINST_BATCH}\n\n" + "\n".join(lines) + "\n"


def check_cell(r: dict) -> str:
    check = r["lossless_check"] or "-"
    if r["check_samples"]:
        check += f" (N={r['check_samples']:,}, TV {r['check_detectable_tv']:.3f}, p={r['check_p']:.3f})"
    return check


@dataclass(frozen=True)
class Column:
    header: str
    align: str  # the markdown alignment cell
    cell: Callable[[dict], str]


MD_COLUMNS = [
    Column("method", "---", lambda r: r["method"]),
    Column("policy", "---", lambda r: r.get("policy", FIXED)),
    Column("sampling", "---", lambda r: r["sampling"]),
    Column("category", "---", lambda r: r["category"]),
    Column("batch", "---:", lambda r: str(r.get("batch", 1))),
    Column("tokens/forward", "---:", lambda r: fmt(r["tokens_per_forward"])),
    Column("speedup", "---:", lambda r: f"{fmt(r['speedup'])}x" if r["speedup"] is not None else "-"),
    Column("step cost", "---:", lambda r: fmt(r.get("step_cost"))),
    Column("tokens/s", "---:", lambda r: fmt(r["tokens_per_s"], 1)),
    Column("mean accepted", "---:", lambda r: fmt(r["mean_accepted"])),
    Column("greedy identical", "---", lambda r: r["greedy_identical"] or "-"),
    Column("lossless check (N, detectable TV)", "---", check_cell),
    Column("draft / target / verify / other", "---",
           lambda r: " / ".join(fmt(r[f"{k[:-2]}_frac"] and 100 * r[f"{k[:-2]}_frac"], 0) for k in SPLIT)),
    Column(PREDICTED, "---:", lambda r: "-" if r.get("predicted_speedup") is None else
           f"{fmt(r['predicted_speedup'])}x ({100 * r['prediction_error']:+.0f}%)"),
    Column(PROJECTED, "---:", lambda r: "-" if r.get("projected_speedup") is None else
           f"{fmt(r['projected_speedup'])}x"),
]
OPTIONAL = {  # column -> whether the rows need it
    PREDICTED: lambda rows: any(r.get("predicted_speedup") is not None for r in rows),
    PROJECTED: lambda rows: any(r.get("projected_speedup") is not None for r in rows),
    "policy": lambda rows: any(r.get("policy", FIXED) != FIXED for r in rows),
    "batch": lambda rows: any(r.get("batch", 1) != 1 for r in rows),
}


def cell_table(rows: list[dict], columns: list[Column]) -> str:
    lines = ["| " + " | ".join(c.header for c in columns) + " |", "|" + "|".join(c.align for c in columns) + "|"]
    for r in rows:
        row = "| " + " | ".join(c.cell(r) for c in columns) + " |"
        lines.append(row + (f" error: {r['errors']}" if r["errors"] else ""))
    return "\n".join(lines) + "\n"


def series(row: dict) -> str:
    """A plot's name for a (method, policy): the bare method under the fixed policy."""
    policy = row.get("policy", FIXED)
    return row["method"] if policy == FIXED else f"{row['method']} ({policy})"


