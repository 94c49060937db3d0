from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from framework.zoo.corpus import EXCLUDED_DIRS, build_corpus, heldout_score, stdlib_files


def test_stdlib_files_skip_tests_and_site_packages(stdlib):
    root = Path(sysconfig.get_paths()["stdlib"])
    assert len(stdlib) > 100 and stdlib == sorted(stdlib)
    assert all(not EXCLUDED_DIRS.intersection(p.relative_to(root).parts[:-1]) for p in stdlib)
    assert root / "os.py" in stdlib


def test_split_is_by_file_and_deterministic(stdlib):
    a, b = build_corpus(stdlib), build_corpus(list(reversed(stdlib)))
    assert a["train"]["path"] == b["train"]["path"] and a["heldout"]["path"] == b["heldout"]["path"]
    train, heldout = set(a["train"]["path"]), set(a["heldout"]["path"])
    assert not train & heldout and len(train) == a["train"].num_rows
    assert 0.01 < len(heldout) / (len(train) + len(heldout)) < 0.12
    assert heldout_score("json/decoder.py") == heldout_score("json/decoder.py")  # not hash()


def test_empty_folder_names_it(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path)):
        stdlib_files(tmp_path)


def test_rows_keep_text_exactly(small_corpus, stdlib):
    root = Path(sysconfig.get_paths()["stdlib"])
    row = small_corpus["train"][0]
    assert set(row) == {"path", "text"}
    assert row["text"] == (root / row["path"]).read_bytes().decode("utf-8")
