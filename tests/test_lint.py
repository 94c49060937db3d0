"""The lint CI runs with the suite: ruff, with the rules pyproject.toml chooses, over every Python file."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_project_passes_its_lint():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, f"ruff check (rules: pyproject.toml [tool.ruff.lint]):\n{out.stdout}{out.stderr}"
