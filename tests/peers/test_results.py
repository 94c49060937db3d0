"""The vLLM figures the README and docs/peers.md quote are the published run's (docs/results_vllm.md, written by
`python -m experiments.compare experiment.publish=<run>/compare.md experiment.publish_page=results_vllm`)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIDE_BY_SIDE = "### Engines side by side (all categories)"


def table_rows(text: str, after: str) -> list[list[str]]:
    """The first Markdown table after `after`, without its header."""
    block = next(b for b in text.split(after, 1)[1].split("\n\n") if b.strip().startswith("|")).strip()
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in block.splitlines()[2:]]


def published() -> dict[tuple[str, str, str], list[str]]:
    rows = table_rows((ROOT / "docs" / "results_vllm.md").read_text(), SIDE_BY_SIDE)
    return {(r[0], r[2], r[3]): r for r in rows}


def test_the_readme_quotes_the_published_greedy_batch_one_row_of_every_vllm_row():
    readme = (ROOT / "README.md").read_text()
    quoted = table_rows(readme, "**Beside vLLM**")
    assert len(quoted) == 5
    cells = published()
    for names, lengths, speeds, speedups in quoted:
        row = cells[names.split(" / ")[0].strip("`"), "greedy", "1"]
        assert names.split(" / ")[1].strip("`") == row[1]
        assert lengths == f"{row[4]} / {row[5]}"
        assert speeds == f"{row[7]} / {row[8]}"
        assert speedups == f"{row[9]} / {row[10]}"
        assert row[11].startswith("5/5")  # greedy identical to our plain decoding, every prompt


def test_the_published_greedy_rows_are_identical_at_every_batch_size():
    for (name, sampling, batch), row in published().items():
        if sampling == "greedy":
            theirs, ours = row[11].split(", ")
            expected = "5/5" if batch == "1" else "20/20"
            assert theirs == expected and ours in (expected, "-"), (name, batch, row[11])
