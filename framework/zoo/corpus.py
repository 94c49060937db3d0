"""The training text: the interpreter's own standard-library sources, split by file.

Test folders are left out on purpose: they hold generated data, deliberately malformed encodings
and huge literal tables that teach the tokenizer nothing about ordinary code. site-packages is
left out so that the corpus depends on the interpreter version only, not on what is installed.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from pathlib import Path

import datasets

EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})


def stdlib_files(root: str | Path | None = None, exclude: frozenset[str] = EXCLUDED_DIRS) -> list[Path]:
    """Every *.py under `root` (default: this interpreter's stdlib), sorted, minus `exclude` dirs."""
    root = Path(root if root is not None else sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py")
                   if p.is_file() and not exclude.intersection(p.relative_to(root).parts[:-1]))
    if not files:
        raise ValueError(f"no .py files found under {root} (excluding folders named {sorted(exclude)})")
    return files


def heldout_score(relative_path: str) -> float:
    """A stable number in [0, 1) per path: sha256, not hash(), which is salted per process."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def read_source(path: Path) -> str | None:
    """The file's text, exactly as stored (newline=''), or None if it is not UTF-8."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except UnicodeDecodeError:
        return None


def build_corpus(paths: list[Path], heldout_fraction: float = 0.05, root: str | Path | None = None) -> datasets.DatasetDict:
    """{"train", "heldout"} datasets of rows {path, text}; a file lands wholly in one split.

    `path` is relative to `root` (default: the paths' common folder), so the split is the same
    on every machine with the same interpreter version, wherever it is installed.
    """
    if not paths:
        raise ValueError(f"no source files given (searched {root or 'nothing'})")
    root = Path(root if root is not None else os.path.commonpath([Path(p).parent for p in paths]))
    splits: dict[str, dict[str, list[str]]] = {"train": {"path": [], "text": []}, "heldout": {"path": [], "text": []}}
    for path in sorted(Path(p) for p in paths):
        text = read_source(path)
        if not text:  # undecodable or empty: nothing to learn
            continue
        relative = path.relative_to(root).as_posix()
        split = splits["heldout" if heldout_score(relative) < heldout_fraction else "train"]
        split["path"].append(relative)
        split["text"].append(text)
    if not splits["train"]["path"]:
        raise ValueError(f"no readable UTF-8 source among {len(paths)} files under {root}")
    return datasets.DatasetDict({name: datasets.Dataset.from_dict(rows) for name, rows in splits.items()})
