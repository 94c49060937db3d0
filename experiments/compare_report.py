"""experiments.compare's outputs: cells from the records, compare.csv/json/md and the plots.

    python -m experiments.compare experiment.publish=<run folder>/compare.md   # publishes that table (below)
    python -m experiments.compare experiment.merge=<sweep folder>              # one table of a -m sweep's jobs

Publishing writes docs/results.md whole (every cell) and the README's headline table (the summary,
between the two BEGIN/END markers below): both are regenerated from a run, never edited by hand.
"""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from experiments.common import job_overrides
from experiments.peers.report import engines_side_by_side
from framework.control.cost_model import Prediction, predict, steps_of
from framework.control.device_profile import PLAIN, DeviceProfile
from framework.core import files
from framework.metrics.acceptance import acceptance_summary
from framework.metrics.engine_counters import EngineCounters
from framework.metrics.engine_record import acceptance_record, counters_record, record_failures
from framework.metrics.latency import QUANTILES, latency_summary
from framework.metrics.profile import speculation_profile
from framework.metrics.trace import RequestTrace

BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
SPLIT = ("draft_s", "target_s", "verify_s", "other_s")
FIXED = "fixed"  # the policy of speculation as configured (generate's policy=None); records before the axis had it
PERCENTILES = tuple(f"p{q}" for q in QUANTILES)  # framework.metrics.latency's, as the csv's and tables' columns
CLOCKS = ("ttft", "tpot", "e2e")
PREDICTION, PROJECTION = "predicted", "projected"  # a row's figures from this machine's profile, from another device's
PREDICTED = "predicted speedup (error)"  # this machine's profile's prediction beside the measured speedup
PROJECTED = "projected speedup"  # experiment.project's profile (another device, or a roofline projection)
LATENCY = [f"{k}_{q}" for k in CLOCKS for q in PERCENTILES]
COLUMNS = ["method", "policy", "sampling", "category", "batch", "tokens_per_forward", "speedup", "step_cost",
           "tokens_per_s", "plain_tokens_per_s", "mean_accepted", "accepted_length_pooled",
           "accepted_length_per_request", "marginal", "conditional", "consistency", "thinking_length", "answer_length",
           *LATENCY, "prompts", "greedy_identical", "lossless_check", "check_samples", "check_detectable_tv", "check_p",
           *(f"{k[:-2]}_frac" for k in SPLIT), "seconds", "plain_seconds", "predicted_speedup", "prediction_error",
           "seconds_error", "projected_speedup", "errors"]


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


def write_outputs(result: dict, out: Path) -> None:
    files.write_json(out / "compare.json", result)
    with files.replacing(out / "compare.csv") as temporary, temporary.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result["rows"] + result["summary"])  # category "all": the summary rows
    files.write_text(out / "compare.md", markdown(result))
    plots(result["rows"], result["summary"], out)


def write_profiles(result: dict, records: Iterable[dict], out: Path) -> list[Path]:
    """One speculation_profile.json per summary cell with drafting steps: profiles/<method>[/<policy>]/<sampling>
    [/batch=B]/, its requests grouped by category."""
    groups = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["id"].startswith("run/") and "error" not in r:
            key = (r["method"], r.get("policy", FIXED), r["sampling"], r.get("batch", 1))
            groups[key][r["category"]] += [RequestTrace.of(t) for t in r.get("traces", [])]
    config, settings, written = result.get("config") or {}, result.get("settings", {}), []
    verifier = (config.get("verifier") or {}).get("_target_", "verifiers.token")
    for row in result["summary"]:
        policy, batch = row.get("policy", FIXED), row.get("batch", 1)
        by_category = groups.get((row["method"], policy, row["sampling"], batch))
        if not by_category or row.get("accepted_length_pooled") is None:
            continue
        folder = out / "profiles" / row["method"] / (policy if policy != FIXED else "") / row["sampling"] / (
            f"batch={batch}" if batch != 1 else "")
        conditions = {"workload": result.get("workload"),
                      "sampling": (result.get("samplings") or {}).get(row["sampling"]),
                      "policy": policy, "concurrency": batch, "engine": "speculum", "hardware": result.get("hardware"),
                      "max_new_tokens": (config.get("experiment") or {}).get("max_new_tokens")}
        profile = speculation_profile(by_category, row["method"], {"config": config.get("target"),
                                                                   "vocabulary": settings.get("target_vocabulary")},
                                      settings.get("methods", {}).get(row["method"], {}), verifier, conditions)
        files.write_json(folder / "speculation_profile.json", profile)
        written.append(folder / "speculation_profile.json")
    return written


def acceptance_records(records: Iterable[dict]) -> list[dict]:
    """One engine-neutral acceptance record per request (AIPerf's SpecDecodeAcceptanceRecord,
    framework.metrics.engine_record) with the run's axes: ours from each row's trace, a peer engine's from its
    counters over the run (engines keep totals: one record per run, its rows together). A record that breaks the
    schema's identities is a bug here, refused by name."""
    out = []
    for r in records:
        if not r["id"].startswith("run/") or "error" in r:
            continue
        axes = {"run": r["id"], "method": r["method"], "policy": r.get("policy", FIXED), "sampling": r["sampling"],
                "category": r["category"], "batch": r.get("batch", 1)}
        if "counters" in r:
            made = [counters_record(EngineCounters.of(r["counters"]), r.get("engine", "peer"), r["new_tokens"])]
        else:
            made = [acceptance_record(RequestTrace.of(t)) for t in r.get("traces", [])]
        for row, record in enumerate(made):
            failures = record_failures(record)
            if failures:
                raise ValueError(f"{r['id']} row {row}: its acceptance record breaks {failures}")
            out.append({**axes, "row": row, **record})
    return out


def write_acceptance_records(records: Iterable[dict], out: Path) -> Path:
    lines = [json.dumps(record) for record in acceptance_records(records)]
    return files.write_text(out / "acceptance_records.jsonl", "".join(line + "\n" for line in lines))


def series(row: dict) -> str:
    """A plot's name for a (method, policy): the bare method under the fixed policy."""
    policy = row.get("policy", FIXED)
    return row["method"] if policy == FIXED else f"{row['method']} ({policy})"


def plots(rows: list[dict], summary: list[dict], out: Path) -> None:
    """Per category, accepted lengths and time split at the smallest batch size; speedup against the batch
    size when several ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    smallest = min((r.get("batch", 1) for r in rows), default=1)
    cell_plots(plt, [r for r in rows if r.get("batch", 1) == smallest], out)
    per_request_plot(plt, [r for r in summary if r.get("batch", 1) == smallest],
                     out / "accepted_length_per_request.png")
    if len({r.get("batch", 1) for r in summary}) > 1:
        against_batch_plot(plt, summary, out / "speedup_vs_batch.png", "speedup", "speedup vs plain of the same batch")
        against_batch_plot(plt, summary, out / "throughput_vs_batch.png", "tokens_per_s",
                           "tokens per second (all rows)", baseline="plain_tokens_per_s")


def per_request_plot(plt, summary: list[dict], path: Path) -> None:
    """Each request's own accepted length (from its histogram), per method and sampling: the spread the pooled
    and per-request means summarise."""
    cells = [(f"{series(r)}\n{r['sampling']}", [1 + sum(int(a) * n for a, n in h.items()) / sum(h.values())
                                                for h in (r.get("acceptance") or {}).get("per_request_histograms", [])
                                                if h])
             for r in summary]
    cells = [(name, values) for name, values in cells if values]
    if not cells:
        return
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(cells)), 4))
    ax.boxplot([values for _, values in cells], showmeans=True)
    ax.set_xticks(range(1, len(cells) + 1), [name for name, _ in cells], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("accepted length per request")
    fig.tight_layout()
    files.save_figure(fig, path, dpi=110)
    plt.close(fig)


def cell_plots(plt, rows: list[dict], out: Path) -> None:
    methods = list(dict.fromkeys(series(r) for r in rows))
    samplings = list(dict.fromkeys(r["sampling"] for r in rows))
    categories = list(dict.fromkeys(r["category"] for r in rows))
    by = {(series(r), r["sampling"], r["category"]): r for r in rows}  # a method may lack a policy's rows

    def speedup(m: str, s: str, c: str) -> float:
        row = by.get((m, s, c))
        return (row and row["speedup"]) or 0.0

    fig, axes = plt.subplots(len(samplings), 1, figsize=(max(6, 0.9 * len(methods) * len(categories) / 2),
                                                         3.5 * len(samplings)), squeeze=False)
    width = 0.8 / max(1, len(categories))
    for ax, sampling in zip(axes[:, 0], samplings):
        for j, category in enumerate(categories):
            values = [speedup(m, sampling, category) for m in methods]
            ax.bar([i + j * width for i in range(len(methods))], values, width, label=category)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(methods))], methods, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel(f"speedup vs plain ({sampling})")
        ax.legend(fontsize=7)
    fig.tight_layout()
    files.save_figure(fig, out / "speedup_by_category.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(len(samplings), 1, figsize=(8, 3.5 * len(samplings)), squeeze=False)
    for ax, sampling in zip(axes[:, 0], samplings):
        for m in methods:
            hist = Counter()
            for c in categories:
                hist.update({int(k): v for k, v in by.get((m, sampling, c), {}).get("accepted_hist", {}).items()})
            total = sum(hist.values())
            if total:
                xs = sorted(hist)
                ax.plot(xs, [hist[x] / total for x in xs], marker="o", label=m)
        ax.set_xlabel("drafts accepted per step")
        ax.set_ylabel(f"share of steps ({sampling})")
        ax.legend(fontsize=7)
    fig.tight_layout()
    files.save_figure(fig, out / "accepted_length.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(methods) * len(samplings)), 4))
    bottoms = None
    cells = [(m, s) for s in samplings for m in methods]
    for k in SPLIT:
        values = []
        for m, s in cells:  # the categories' shares, weighted by their time
            parts = [by[m, s, c] for c in categories if (m, s, c) in by]
            total = sum(r["seconds"] for r in parts)
            values.append(sum((r[f"{k[:-2]}_frac"] or 0.0) * r["seconds"] for r in parts) / total if total else 0.0)
        ax.bar(range(len(cells)), values, bottom=bottoms, label=k[:-2])
        bottoms = values if bottoms is None else [a + b for a, b in zip(bottoms, values)]
    labels = [f"{m}\n{s}" for m, s in cells]
    ax.set_xticks(range(len(cells)), labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("share of the decoding loop")
    ax.legend(fontsize=7)
    fig.tight_layout()
    files.save_figure(fig, out / "time_split.png", dpi=110)
    plt.close(fig)


def against_batch_plot(plt, summary: list[dict], path: Path, key: str, ylabel: str,
                       baseline: str | None = None) -> None:
    """One panel per sampling, one line per (method, policy) of `key` against the batch size: a method's colour,
    solid under the fixed policy; `baseline`: the baseline's own line of that row key (dashed black)."""
    samplings = list(dict.fromkeys(r["sampling"] for r in summary))
    palette = plt.get_cmap("tab20")  # a method's colour of its own (the default cycle repeats after 10)
    colours = {m: palette(i % 20) for i, m in enumerate(dict.fromkeys(r["method"] for r in summary))}
    batches = sorted({r.get("batch", 1) for r in summary})
    fig, axes = plt.subplots(1, len(samplings), figsize=(6 * len(samplings), 4.5), squeeze=False)
    for ax, sampling in zip(axes[0], samplings):
        lines, base = defaultdict(list), {}
        for r in summary:
            if r["sampling"] == sampling and r.get(key) is not None:
                lines[r["method"], r.get("policy", FIXED)].append((r.get("batch", 1), r[key]))
            if r["sampling"] == sampling and baseline and r.get(baseline) is not None:
                base.setdefault(r.get("batch", 1), r[baseline])
        for (method, policy), points in lines.items():
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, marker="o", color=colours[method], linestyle="-" if policy == FIXED else "--",
                    label=series({"method": method, "policy": policy}))
        if base:
            xs, ys = zip(*sorted(base.items()))
            ax.plot(xs, ys, marker="s", color="black", linestyle=":", label="baseline")
        else:
            ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        ax.set_title(sampling, fontsize=9)
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))  # beside the panels, not on the lines
    fig.tight_layout()
    files.save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)


REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS_HEAD = """# {title}

Generated by `python -m experiments.compare experiment.publish={table}` from the run's compare.md and plots;
do not edit by hand. The command, configuration, machine and versions are at the end; caveats in
[experiments](experiments.md).

"""
PLOTS = ("speedup_by_category", "accepted_length", "accepted_length_per_request", "time_split", "speedup_vs_batch",
         "throughput_vs_batch")


def update_readme(table: Path, readme: Path = REPOSITORY / "README.md") -> None:
    """The summary (the part of compare.md before BY_CATEGORY) between the README's markers."""
    text = readme.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"{readme} needs exactly one {BEGIN} and one {END} around its results section")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    summary = table.read_text().split(BY_CATEGORY)[0].split(f"\n{AGAINST_BATCH}")[0].split(f"\n{ACCEPTANCE}")[0]
    if summary.startswith(SIDE_BY_SIDE):  # several policies: their side-by-side, the full summary on the results page
        summary = summary.split(BY_METHOD)[0]
    summary = summary.rstrip() + "\n"
    files.write_text(readme, f"{head}{BEGIN}\n{summary}{END}{tail}")


def publish(table: Path, root: Path = REPOSITORY, page: str = "results", readme: bool = True) -> Path:
    """Every cell and the run's plots to docs/<page>.md (plots in docs/<page>/); the summary to the README's
    table when `readme`."""
    serving = table.name == "throughput.md"  # a throughput-against-concurrency run (experiments/throughput.py)
    if readme and serving:
        raise ValueError("a throughput table goes to its own page: publish it with experiment.publish_readme=false")
    if readme:
        update_readme(table, root / "README.md")
    shown = []
    for name in sorted(p.stem for p in table.parent.glob("throughput_*.png")) if serving else PLOTS:
        if (table.parent / f"{name}.png").is_file():
            files.write_bytes(root / "docs" / page / f"{name}.png", (table.parent / f"{name}.png").read_bytes())
            shown.append(f"![{name}]({page}/{name}.png)")
    title = "Results" if page == "results" else f"Results: {page}"
    text = RESULTS_HEAD.format(title=title, table=table) + table.read_text()
    return files.write_text(root / "docs" / f"{page}.md",
                            text + ("\n### Plots\n\n" + "\n\n".join(shown) + "\n" if shown else ""))


def merge(folder: Path) -> dict:
    """Every compare.json under a sweep folder as one result, written to the folder (csv/json/md,
    plots). A method that several jobs ran gets the job's overrides in its name, e.g.
    "draft (proposer.depth=2)", so the cells stay apart."""

    if not folder.is_dir():
        raise ValueError(f"not a folder: {folder}")
    jobs = sorted(folder.rglob("compare.json"))
    jobs = [j for j in jobs if j.parent != folder]  # not an earlier merge of this folder
    if not jobs:
        raise ValueError(f"no compare.json under {folder}: run experiments.compare with -m into it first")
    overrides = [job_overrides(j.parent) for j in jobs]
    varied = [k for k in dict.fromkeys(k for o in overrides for k in o)
              if len({repr(o.get(k)) for o in overrides}) > 1]  # the settings the sweep varied
    loaded = [(", ".join(f"{k}={o[k]}" for k in varied if k in o), json.loads(j.read_text()))
              for j, o in zip(jobs, overrides)]
    counts = Counter(m for _, result in loaded for m in {r["method"] for r in result["summary"]})  # jobs per method
    merged = {"rows": [], "summary": [], "skipped": {}, "notes": [],
              "jobs": [str(j.parent.relative_to(folder)) for j in jobs]}
    for label, result in loaded:
        for part in ("rows", "summary"):
            merged[part] += [{**r, "method": (f"{r['method']} ({label})" if label and counts[r["method"]] > 1
                                              else r["method"])}
                             for r in result[part]]
        merged["skipped"].update(result.get("skipped", {}))
        merged["notes"] += [n for n in result.get("notes", []) if n not in merged["notes"]]
    write_outputs(merged, folder)
    return merged
