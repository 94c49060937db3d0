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


def test_docs_quote_the_committed_profile_of_a_plain_token():
    """docs/peers.md's milliseconds are docs/results_vllm/peer_profile.json's
    (python -m experiments.peers.profile_plain, copied from outputs/peer_profile)."""
    import json

    profile = json.loads((ROOT / "docs" / "results_vllm" / "peer_profile.json").read_text())
    page = (ROOT / "docs" / "peers.md").read_text()
    ms = profile["ms_per_token"]
    assert (f"ours {ms['ours']:.1f} ms per token, transformers' `generate` {ms['transformers']:.1f} ms, "
            f"vLLM {ms['vllm']:.1f} ms") in page
    split = profile["ours_split"]["per_token_ms"]
    for name, words in (("matmul", "matrix products"), ("attention", "attention"),
                        ("other tensor ops", "cache\nwrites)"),
                        ("python and dispatch in the forward", "Python and dispatch inside the forward")):
        assert f"{split[name]:.1f} ms" in page.split(words, 1)[1][:40], name
    readme = (ROOT / "README.md").read_text()
    assert f"vLLM {ms['vllm']:.1f} ms, transformers {ms['transformers']:.1f}, ours {ms['ours']:.1f}" in readme


def test_docs_quote_the_committed_law_check_of_every_vllm_row():
    """docs/peers.md's law table is docs/results_vllm/peer_law.json's (python -m experiments.peers.law)."""
    import json

    results = json.loads((ROOT / "docs" / "results_vllm" / "peer_law.json").read_text())["results"]
    quoted = {r[0].strip("`"): r for r in table_rows((ROOT / "docs" / "peers.md").read_text(), "## The law through")}
    assert set(quoted) == {r["row"] for r in results}
    for r in results:
        row = quoted[r["row"]]
        assert row[1:4] == [f"{r['p_by_depth'][d]:.3f}" for d in ("1", "2", "3")]
        assert row[4] == ("pass" if r["passes"] else "FAIL") and row[5] == f"{r['drafts']:,}"
        assert r["passes"] == (r["p_by_depth"][str(r["depth"])] >= 1e-3)
