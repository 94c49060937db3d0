"""What an experiments.compare run writes from its result: compare.json, compare.csv (COLUMNS), compare.md and
the plots; one speculation_profile.json per summary cell; one engine-neutral acceptance record per request."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from framework.core import files
from framework.metrics.engine_counters import EngineCounters
from framework.metrics.engine_record import acceptance_record, counters_record, record_failures
from framework.metrics.profile import speculation_profile
from framework.metrics.trace import RequestTrace
from measurement.compare_plots import plots
from measurement.compare_report import CLOCKS, FIXED, PERCENTILES, SPLIT, markdown

LATENCY = [f"{k}_{q}" for k in CLOCKS for q in PERCENTILES]
COLUMNS = ["method", "policy", "sampling", "category", "batch", "tokens_per_forward", "speedup", "step_cost",
           "tokens_per_s", "plain_tokens_per_s", "mean_accepted", "accepted_length_pooled",
           "accepted_length_per_request", "marginal", "conditional", "consistency", "thinking_length", "answer_length",
           *LATENCY, "prompts", "greedy_identical", "lossless_check", "check_samples", "check_detectable_tv", "check_p",
           *(f"{k[:-2]}_frac" for k in SPLIT), "seconds", "plain_seconds", "predicted_speedup", "prediction_error",
           "seconds_error", "projected_speedup", "errors"]


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
