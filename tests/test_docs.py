"""The front door stays a front door, and the docs site builds without a broken link."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"docs/design\.md sections? (\d+)(?: and (\d+))?")


def test_the_site_builds_strictly(tmp_path):
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "design" / "index.html").exists()


def test_readme_is_short_and_keeps_two_quick_start_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    quick_start = readme.split("## Quick start")[1].split("\n## ")[0]
    commands = [line for line in quick_start.splitlines() if line.startswith("pip install torch==2.13.0")]
    assert len(commands) == 2 and commands[0].endswith("python -m experiments.run") and commands[1].endswith("pytest")


def cited_sections(root: Path) -> list[tuple[str, int]]:
    cited = []
    for path in [*root.glob("[fpvehmr]*/**/*.py"), *root.glob("conf/**/*.yaml")]:
        for match in CITATION.finditer(path.read_text()):
            cited += [(str(path.relative_to(root)), int(n)) for n in match.groups() if n]
    return cited


def test_every_cited_design_section_exists():
    design = (ROOT / "docs" / "design.md").read_text()
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", design, flags=re.M)}
    cited = cited_sections(ROOT)
    assert cited, "the code cites the design by section"
    assert [c for c in cited if c[1] not in sections] == []


def test_a_citation_of_a_missing_section_is_found(tmp_path):
    (tmp_path / "verifiers").mkdir()
    (tmp_path / "verifiers" / "x.py").write_text('"""The rule (docs/design.md sections 4 and 12)."""\n')
    assert cited_sections(tmp_path) == [("verifiers/x.py", 4), ("verifiers/x.py", 12)]
