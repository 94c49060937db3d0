import os

# Triton kernels run on CPU only in interpreter mode; this must be set before any @triton.jit runs.
os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

# The test models are tiny: intra-op threads buy nothing and, on a shared machine, oversubscribed
# OpenMP threads make the suite several times slower (experiments.check also runs at one thread).
torch.set_num_threads(1)
