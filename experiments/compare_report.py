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
from collections.abc import Iterable
from pathlib import Path

from experiments.common import job_overrides
from framework.core import files

BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
SPLIT = ("draft_s", "target_s", "verify_s", "other_s")
COLUMNS = ["method", "sampling", "category", "tokens_per_forward", "speedup", "step_cost", "tokens_per_s", "mean_accepted",
           "prompts", "greedy_identical", "lossless_check", "check_samples", "check_detectable_tv", "check_p",
           *(f"{k[:-2]}_frac" for k in SPLIT), "seconds", "plain_seconds", "errors"]


def aggregate(methods: list[str], samplings, categories: list[str], records: Iterable[dict]) -> list[dict]:
    """One row per (method, sampling, category) from the run records, in plan order."""
    runs, checks = defaultdict(list), {}
    for r in records:
        if r["id"].startswith("run/"):
            runs[r["method"], r["sampling"], r["category"]].append(r)
        elif r["id"].startswith("check/"):
            checks[r["method"], r["sampling"]] = r
    rows = []
    for method in methods:
        for sampling in samplings:
            for category in categories:
                cell = runs.get((method, sampling, category), [])
                ok = [r for r in cell if "error" not in r]
                errors = sorted({r["error"] for r in cell if "error" in r})
                seconds, plain = sum(r["seconds"] for r in ok), sum(r["plain_seconds"] for r in ok)
                tokens, forwards = sum(r["new_tokens"] for r in ok), sum(r["forwards"] for r in ok)
                plain_forwards = sum(r.get("plain_forwards", 0) for r in ok)
                steps, accepted = sum(r.get("steps", 0) for r in ok), sum(r.get("accepted", 0) for r in ok)
                split = {k: sum(r.get("split", {}).get(k, 0.0) for r in ok) for k in SPLIT}
                loop = sum(split.values())
                same = [r["same_as_plain"] for r in ok if r.get("same_as_plain") is not None]
                check = checks.get((method, sampling), {})
                rows.append({
                    "method": method, "sampling": sampling, "category": category, "prompts": len(ok),
                    "tokens_per_forward": tokens / forwards if forwards else None,
                    "speedup": plain / seconds if seconds else None,
                    # one forward of the method in forwards of the baseline: the speedup is at most
                    # tokens per forward / step cost
                    "step_cost": (seconds / forwards) / (plain / plain_forwards) if forwards and plain and plain_forwards else None,
                    "tokens_per_s": tokens / seconds if seconds else None,
                    "mean_accepted": accepted / steps if steps else None,
                    "greedy_identical": f"{sum(same)}/{len(same)}" if same else None,
                    "lossless_check": check_verdict(check),
                    "check_samples": check.get("samples"), "check_detectable_tv": check.get("detectable_tv"),
                    "check_p": check.get("g_test_p"),
                    **{f"{k[:-2]}_frac": (split[k] / loop if loop else None) for k in SPLIT},
                    "seconds": seconds, "plain_seconds": plain, "errors": "; ".join(errors) or None,
                    "accepted_hist": {str(k): v for k, v in sorted(Counter(a for r in ok for a in r.get("accepted_counts", [])).items())},
                })
    return rows


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


def markdown(result: dict) -> str:
    """The summary over all categories, then every cell (BY_CATEGORY); the README takes the first."""
    text = "### By method (all categories)\n\n" + cell_table(result["summary"])
    if result.get("skipped"):
        text += "\nSkipped (do not run on this target): " + "; ".join(f"{k} ({v})" for k, v in result["skipped"].items()) + "\n"
    return text + f"\n{BY_CATEGORY}\n\n" + cell_table(result["rows"])


def cell_table(rows: list[dict]) -> str:
    lines = ["| method | sampling | category | tokens/forward | speedup | step cost | tokens/s | mean accepted | "
             "greedy identical | lossless check (N, detectable TV) | draft / target / verify / other |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        check = r["lossless_check"] or "-"
        if r["check_samples"]:
            check += f" (N={r['check_samples']:,}, TV {r['check_detectable_tv']:.3f}, p={r['check_p']:.3f})"
        split = " / ".join(fmt(r[f"{k[:-2]}_frac"] and 100 * r[f"{k[:-2]}_frac"], 0) for k in SPLIT)
        speed = f"{fmt(r['speedup'])}x" if r["speedup"] is not None else "-"
        row = (f"| {r['method']} | {r['sampling']} | {r['category']} | {fmt(r['tokens_per_forward'])} | {speed} | "
               f"{fmt(r.get('step_cost'))} | {fmt(r['tokens_per_s'], 1)} | {fmt(r['mean_accepted'])} | {r['greedy_identical'] or '-'} | {check} | {split} |")
        lines.append(row + (f" error: {r['errors']}" if r["errors"] else ""))
    return "\n".join(lines) + "\n"


def write_outputs(result: dict, out: Path) -> None:
    files.write_json(out / "compare.json", result)
    with files.replacing(out / "compare.csv") as temporary, temporary.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result["rows"] + result["summary"])  # category "all": the summary rows
    files.write_text(out / "compare.md", markdown(result))
    plots(result["rows"], out)


def plots(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(r["method"] for r in rows))
    samplings = list(dict.fromkeys(r["sampling"] for r in rows))
    categories = list(dict.fromkeys(r["category"] for r in rows))
    by = {(r["method"], r["sampling"], r["category"]): r for r in rows}

    fig, axes = plt.subplots(len(samplings), 1, figsize=(max(6, 0.9 * len(methods) * len(categories) / 2), 3.5 * len(samplings)), squeeze=False)
    width = 0.8 / max(1, len(categories))
    for ax, sampling in zip(axes[:, 0], samplings):
        for j, category in enumerate(categories):
            values = [by[m, sampling, category]["speedup"] or 0.0 for m in methods]
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
                hist.update({int(k): v for k, v in by[m, sampling, c]["accepted_hist"].items()})
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
            parts = [by[m, s, c] for c in categories]
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


REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS_HEAD = """# Results

Generated by `python -m experiments.compare experiment.publish={table}` from the run's compare.md; do not edit by
hand. The command that made the run, its machine and its caveats are in the README's Results section
and in [experiments](experiments.md).

"""


def update_readme(table: Path, readme: Path = REPOSITORY / "README.md") -> None:
    """The summary (the part of compare.md before BY_CATEGORY) between the README's markers."""
    text = readme.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"{readme} needs exactly one {BEGIN} and one {END} around its results section")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    summary = table.read_text().split(BY_CATEGORY)[0].rstrip() + "\n"
    files.write_text(readme, f"{head}{BEGIN}\n{summary}{END}{tail}")


def publish(table: Path, root: Path = REPOSITORY) -> None:
    """Every cell to docs/results.md, the summary to the README."""
    update_readme(table, root / "README.md")
    files.write_text(root / "docs" / "results.md", RESULTS_HEAD.format(table=table) + table.read_text())


def merge(folder: Path) -> dict:
    """Every compare.json under a sweep folder as one result, written to the folder (csv/json/md,
    plots). A method that several jobs ran gets the job's overrides in its name, e.g.
    "draft (proposer.gamma=2)", so the cells stay apart."""

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
    counts = Counter(r["method"] for _, result in loaded for r in result["summary"])
    merged = {"rows": [], "summary": [], "skipped": {}, "jobs": [str(j.parent.relative_to(folder)) for j in jobs]}
    for label, result in loaded:
        for part in ("rows", "summary"):
            merged[part] += [{**r, "method": f"{r['method']} ({label})" if label and counts[r["method"]] > 1 else r["method"]}
                             for r in result[part]]
        merged["skipped"].update(result.get("skipped", {}))
    write_outputs(merged, folder)
    return merged
