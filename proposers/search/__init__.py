"""Design-time search: the static tree a proposer drafts, sized by measured costs and acceptance."""
