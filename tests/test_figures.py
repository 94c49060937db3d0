"""Figures the docs quote come from committed result files that a documented command regenerates, and say what
those files say (issue 52, deliverable 3): the KL-vs-LK comparison (docs/figures/eagle3_kl_vs_lk.json, the
measurements of `experiments.train experiment=zoo_eagle3 loss=kl_vs_lk`), tensor parallelism on this CPU
(docs/figures/bench_sharded.json, `experiments.bench_sharded`) and the README's parallel drafters
(docs/results_parallel.md, published by `experiments.compare experiment.publish=...`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"


def read(name: str) -> dict:
    path = FIGURES / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: the docs quote it")
    return json.loads(path.read_text())


def test_the_kl_vs_lk_figures_are_the_committed_measurements():
    measured = read("eagle3_kl_vs_lk.json")
    text = (ROOT / "docs" / "training.md").read_text()
    for temperature, label in (("T=0.0", "greedy"), ("T=1.0", "T = 1")):
        row = measured["paired_lengths"][temperature]
        gap = row["lk-kl"]
        quoted = (f"{label} KL {row['kl']:.3f}, LK {row['lk']:.3f}, **{'LK - KL = ' if label == 'greedy' else ''}"
                  f"{gap['mean']:+.3f} +- {gap['se']:.3f}**")
        assert quoted in text, quoted
    for loss in ("kl", "lk"):
        held = measured["by_loss"][loss]["heldout"]
        cells = [held["text"]["top1_target"], held["text"]["accept_sampled"], held["continuations"]["accept_sampled"]]
        row = f"| {loss.upper()} | " + " | ".join(" / ".join(f"{x:.3f}" for x in cell[:3]) for cell in cells) + " |"
        assert row in text.replace("**", ""), row  # bold marks the better of the two


def test_the_tensor_parallel_table_is_the_committed_benchmark():
    bench = read("bench_sharded.json")
    text = (ROOT / "docs" / "sharding.md").read_text()
    for row in bench["rows"]:
        line = (f"| {row['placement']} | {'yes' if row['same_tokens'] else 'NO'} | "
                f"{row['plain_s_per_forward'] * 1e3:.1f} ms | {row['spec_s_per_forward'] * 1e3:.1f} ms | "
                f"{row['plain_vs_one']:.2f}x | {row['speedup']:.2f}x |")
        assert line in text, line


def published_speedups(page: str) -> dict[str, str]:
    """method -> its greedy speedup cell in a published compare page's all-categories summary."""
    text = (ROOT / "docs" / page).read_text()
    block = text.split("all categories", 1)[1]
    header = next(line for line in block.splitlines() if line.startswith("| method"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    cells = {}
    for line in block.splitlines():
        values = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and len(values) == len(columns) and values[1] == "greedy":
            cells[values[0]] = values[columns.index("speedup")]
    return cells


def test_the_readmes_parallel_drafters_are_the_published_run():
    cells = published_speedups("results_parallel.md")
    line = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("`dflash`"))
    for method, quoted in re.findall(r"`?(\w+)`? (\d+\.\d+x)", line):
        assert cells[method] == quoted, (method, quoted, cells.get(method))
    assert {"dflash", "pard", "peagle"} <= {m for m, _ in re.findall(r"`?(\w+)`? (\d+\.\d+x)", line)}


def published_rows(page: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """(method, sampling, batch) -> the cells of a published compare page's all-categories table, by column name."""
    text = (ROOT / "docs" / page).read_text()
    lines = text.split("all categories", 1)[1].splitlines()
    header = next(line for line in lines if line.startswith("| method"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = {}
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(columns, (c.strip() for c in line.strip("|").split("|"))))
        rows[cells["method"], cells["sampling"], cells.get("batch", "1")] = cells
    return rows


def test_the_cross_vocabulary_table_is_the_published_run():
    rows = published_rows("results_cross_vocab.md")
    text = (ROOT / "docs" / "constraints.md").read_text().replace("**", "")
    for method in ("draft", "cross_vocab", "string_match"):
        greedy, sampled = rows[method, "greedy", "1"], rows[method, "t1", "1"]
        wide = f"{rows[method, 'greedy', '4']['speedup']} / {rows[method, 't1', '4']['speedup']}"
        line = (f"{greedy['tokens/forward']}, {greedy['speedup']} | {greedy['greedy identical']} | "
                f"{sampled['tokens/forward']}, {sampled['speedup']} | {wide} |")
        assert line in text, (method, line)
