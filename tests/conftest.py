import gc
import os
import subprocess
from pathlib import Path

# Triton kernels run on CPU only in interpreter mode; this must be set before any @triton.jit runs.
os.environ.setdefault("TRITON_INTERPRET", "1")
# No test reaches a hub: a path that is not a local folder must fail, not download (set before transformers loads).
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

# The test models are tiny: intra-op threads buy nothing and, on a shared machine, oversubscribed
# OpenMP threads make the suite several times slower (experiments.check also runs at one thread).
torch.set_num_threads(1)
# The cyclic collector's default (a pass every 700 net allocations, the older generations' passes walking the heap
# torch and transformers leave) took ~6% of a test process's time; tests make many short-lived objects, so rarer
# passes cost little memory (measured in issue 57's note).
gc.set_threshold(20_000, 20, 20)

ROOT = Path(__file__).resolve().parents[1]
# What a run leaves behind that is not a test's writing: bytecode, tool caches, the editable install.
TOOL_FILES = ("__pycache__", ".pytest_cache", ".ruff_cache", ".egg-info")


def repository_files(root: Path = ROOT) -> set[str] | None:
    """Every untracked or changed path of the repository, ignored ones included (None without git)."""
    try:
        listed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--ignored"], cwd=root,
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {line for line in listed.splitlines() if not any(part in line for part in TOOL_FILES)}


@pytest.fixture(scope="session", autouse=True)
def nothing_written_outside_tmp_path(tmp_path_factory):
    """Tests write under tmp_path only: caches a run builds (REST datastores) go to a session folder,
    and the repository holds after the run what it held before."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))  # subprocesses inherit it
    before = repository_files()
    yield
    after = repository_files()
    if before is not None and after is not None:
        assert after <= before, f"tests wrote into the repository: {sorted(after - before)[:10]}"
