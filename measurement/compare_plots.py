"""experiments.compare's plots: speedup by category, accepted lengths (pooled and per request), the loop's time
split, and speedup and throughput against the batch size when several ran. matplotlib loads at the first plot."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from framework.core import files
from measurement.compare_report import FIXED, SPLIT, series


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
