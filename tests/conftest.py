import os

# Triton kernels run on CPU only in interpreter mode; this must be set before any @triton.jit runs.
os.environ.setdefault("TRITON_INTERPRET", "1")
