"""Figures the docs quote come from committed result files that a documented command regenerates, and say what
those files say (issue 52, deliverable 3): the KL-vs-LK comparison (docs/figures/eagle3_kl_vs_lk.json, the
measurements of `experiments.train training=zoo_eagle3 loss=kl_vs_lk`), tensor parallelism on this CPU
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
    line = next(line for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith("**Parallel drafters**"))
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


# Every figure in the README and docs/: a ratio, a time, a rate, a percentage, or a decimal in a table cell.
QUOTED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:x\b| ?ms\b| s\b| tokens?/s| tok/s|%)")
CELL = re.compile(r"(?<![\w.-])\d+\.\d+x?(?![\w.])")  # not a name's version (Llama-3.1)
SOURCE = re.compile(r"\((?:docs/)?(results\w*\.md|(?:figures|results\w*)/[\w./-]+\.json)[)#]")
UNRECORDED = "_Unrecorded:"  # a section's visible label: measured by hand before runs left committed result files


def figures(section: str) -> list[str]:
    found = []
    for line in section.splitlines():
        found += CELL.findall(line) if line.startswith("|") else QUOTED.findall(line)
    return found


def number(figure: str) -> str:
    return re.match(r"\d+(?:\.\d+)?", figure).group()


def sections(page: Path) -> list[tuple[str, str]]:
    """(section, the sources it and its parent section link) for the page's ## and ### sections; code blocks and
    inline code (commands, settings) left out."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    found, parent = [], ""
    for section in re.split(r"\n(?=#{2,3} )", text):
        if not section.startswith("### "):
            parent = section
        found.append((section, SOURCE.findall(section) + SOURCE.findall(parent)))
    return found


def renderings(path: Path) -> set[str]:
    """Every way a number in a result file may be quoted: as written, rounded to 0-4 decimals, and scaled from
    seconds to ms or from a fraction to a percentage."""
    held = set()
    for written in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?", path.read_text()):
        value = abs(float(written))
        held.add(written.lstrip("-"))
        for scaled in (value, value * 1e3, value * 100):
            held |= {f"{scaled:.{decimals}f}" for decimals in range(5)}
    return held


def unsourced(page: Path) -> list[tuple[str, list[str]]]:
    """(section, figures) for each section whose figures the result files it links do not hold."""
    missing = []
    for section, sources in sections(page):
        quoted = figures(section)
        if not quoted or UNRECORDED in section:
            continue
        held = set()
        for source in sources:
            path = ROOT / "docs" / source
            assert path.is_file(), f"{page.name} links {source}, which is not committed"
            held |= renderings(path)
        absent = [f for f in quoted if number(f) not in held]
        if absent:
            missing.append((section.splitlines()[0], absent))
    return missing


DOC_PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md") if not p.name.startswith("results"))


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: p.name)
def test_every_quoted_figure_is_in_a_linked_result_file_or_labelled_unrecorded(page):
    missing = unsourced(page)
    assert not missing, (f"{page.name}: figures not in the result files their section links (link the committed "
                         f"result, or label the section '{UNRECORDED} ...'): {missing}")


def test_the_figure_check_sees_a_figure_that_its_result_file_lacks(tmp_path):
    results = (ROOT / "docs" / "results.md").read_text()
    page = tmp_path / "page.md"
    figure = re.search(r"\b\d\.\d\dx", results).group(0)  # a speedup the published page holds
    page.write_text(f"## Run\n\nThe draft gains {figure} ([all cells](results.md)).\n")
    assert "9.87x" not in results and not unsourced(page)
    page.write_text("## Run\n\nThe draft gains 9.87x ([all cells](results.md)).\n\n| a | 7.654 |\n")
    assert unsourced(page) == [("## Run", ["9.87x", "7.654"])]
    page.write_text(f"## Run\n\n{UNRECORDED} by hand, 2026-11-30._ The draft gains 9.87x.\n")
    assert not unsourced(page)


def test_the_readmes_results_block_is_the_published_page():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- compare:begin -->", 1)[1].split("<!-- compare:end -->", 1)[0].strip()
    assert block.count("\n|") > 3 and block in (ROOT / "docs" / "results.md").read_text()
