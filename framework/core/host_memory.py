"""Large CPU tensors from the C heap, not from fresh memory maps.

glibc serves an allocation over its mmap threshold (at most 32 MiB by default) with a new memory map and
unmaps it on free, so every such tensor ([1,024 rows x 3 nodes x 6,144 tokens] of laws is 75 MB) is paid
again in page faults, one per 4 KiB page: in a first-token run this was 45% of the wall time, in the
kernel. Raising the threshold (and keeping freed memory instead of trimming it) lets later tensors
reuse the same pages. A process setting, so entry points opt in; the library never sets it on import.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def keep_large_tensors_on_heap(threshold: int = 2**30) -> bool:
    """Serve allocations under `threshold` bytes from the heap and keep freed memory for reuse. False where the C
    library has no mallopt (macOS, musl): nothing changes there."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
