"""An EagleProposer that records what the head computed at each step, for tests that replay it."""

from proposers import EagleProposer


class Recording(EagleProposer):
    """Keeps, per step, the root and the head's output at the root's position, and each commit."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.roots, self.results = [], []

    def catch_up(self, state):
        out = super().catch_up(state)
        self.roots.append((state.root.clone(), out.clone()))
        return out

    def commit(self, result):
        self.results.append(result)
        super().commit(result)
