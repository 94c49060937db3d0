"""The engines-side-by-side table of experiments.compare: each vLLM row beside the row of ours with the same drafter
and settings (experiment.vllm.matches), acceptance by one definition, speed against each engine's own plain decoding.
"""

from __future__ import annotations

from measurement.peers.rows import OWN_PLAIN

SIDE_BY_SIDE = "### Engines side by side (all categories)"
OUR_PLAIN = "plain"  # the baseline row of ours: its figures are every row's plain_* columns


def fmt(value, digits: int = 2, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def engines_side_by_side(summary: list[dict], settings: dict | None) -> str:
    """Per (vLLM row, sampling, batch) that ran: its mean acceptance length and ours (pooled: 1 + accepted / drafting
    steps), tokens per second, and speedup over its engine's own plain decoding; nothing when no vLLM row ran."""
    matches = (settings or {}).get("matches") or {}
    cells = {(r["method"], r["sampling"], r.get("batch", 1)): r for r in summary if r.get("policy", "fixed") == "fixed"}
    peer_rows = [key for key in cells if key[0] in matches]
    if not peer_rows:
        return ""
    head = ["vLLM row", "ours", "sampling", "batch", "vLLM: acceptance length", "ours: acceptance length", "ratio",
            "vLLM: tokens/s", "ours: tokens/s", "vLLM: speedup over its plain", "ours: speedup over our plain",
            "greedy identical to our plain (vLLM, ours)"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|---:|" + "---:|" * 7 + "---|"]
    for method, sampling, batch in peer_rows:
        theirs, ours_name = cells[method, sampling, batch], matches[method]
        ours = cells.get((ours_name, sampling, batch))
        their_plain = cells.get((OWN_PLAIN, sampling, batch))
        ours_speed = theirs["plain_tokens_per_s"] if ours_name == OUR_PLAIN else ours and ours["tokens_per_s"]
        ours_speedup = 1.0 if ours_name == OUR_PLAIN else ours and ours["speedup"]
        ours_length = None if ours_name == OUR_PLAIN else ours and ours.get("accepted_length_pooled")
        theirs_length = theirs.get("accepted_length_pooled")
        identical = f"{theirs['greedy_identical'] or '-'}, {(ours or {}).get('greedy_identical') or '-'}"
        lines.append("| " + " | ".join([
            method, ours_name, sampling, str(batch), fmt(theirs_length), fmt(ours_length),
            fmt(ratio(theirs_length, ours_length), 3), fmt(theirs["tokens_per_s"], 1), fmt(ours_speed, 1),
            fmt(ratio(theirs["tokens_per_s"], their_plain and their_plain["tokens_per_s"]), 2, "x"),
            fmt(ours_speedup, 2, "x"), identical]) + " |")
    note = ("Acceptance length: 1 + accepted drafts / steps that drafted, vLLM's from its spec_decode counters, "
            "ours from our traces (framework.metrics.engine_counters). Each engine's speedup is over its own plain "
            "decoding of the same prompts in the same run; both engines at the run's thread count.")
    return f"\n{SIDE_BY_SIDE}\n\n" + "\n".join(lines) + f"\n\n{note}\n"
