"""keep_large_tensors_on_heap: tensors over glibc's mmap threshold stop costing page faults at every allocation."""

import subprocess
import sys

import pytest

FAULTS = """
import resource, sys, torch
from framework.core.host_memory import keep_large_tensors_on_heap
on = sys.argv[1] == "on" and keep_large_tensors_on_heap()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    torch.ones(16 * 2**20).sum()  # 64 MiB, written whole
print(on, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(setting: str) -> tuple[bool, int]:
    done = subprocess.run([sys.executable, "-c", FAULTS, setting], capture_output=True, text=True, check=True)
    on, count = done.stdout.split()
    return on == "True", int(count)


def test_large_tensors_reuse_their_pages():
    """Each in a fresh process (the setting is the process's)."""
    (_, mapped), (on, heap) = faults("off"), faults("on")
    if not on:
        pytest.skip("this C library has no mallopt")
    assert mapped > 40 * 16 * 2**20 / 4096 * 0.9  # a fault per page of every tensor without it
    assert heap < mapped / 4  # the first few tensors grow the heap; the rest reuse it
