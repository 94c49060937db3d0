"""The signposts list everything: the README's method and verifier tables every config option, docs/index.md every
page (a new option or page that is not listed fails here, naming it)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def options(group: str) -> set[str]:
    return {p.stem for p in (ROOT / "conf" / group).glob("*.yaml")}


def table_names(text: str, heading: str, column: str) -> set[str]:
    """The `names` in the first cell of each row of the table under `## heading` whose header starts with column."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows and rows[0].startswith(f"| {column}"), f"no table under '## {heading}' starting with {column}"
    return {name for row in rows[2:] for name in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_the_readme_tables_list_every_proposer_and_verifier():
    readme = (ROOT / "README.md").read_text()
    for group, heading in (("proposer", "Methods"), ("verifier", "Verifiers")):
        listed = table_names(readme, heading, f"`{group}=`")
        assert not options(group) - listed, f"README's {heading} table lacks {sorted(options(group) - listed)}"
        unknown = sorted(listed - options(group))
        assert not unknown, f"README's {heading} table names options with no config: {unknown}"


def test_the_index_links_every_page():
    linked = set(re.findall(r"\]\(([\w/]+\.md)(?:#[\w-]+)?\)", (ROOT / "docs" / "index.md").read_text()))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert not pages - linked, f"docs/index.md does not link {sorted(pages - linked)}"


def test_the_site_navigation_has_every_page():
    nav = set(re.findall(r"^\s+- (?:\"[^\"]+\"|[^:]+): ([\w/]+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert not pages - nav, f"mkdocs.yml's nav lacks {sorted(pages - nav)}"
