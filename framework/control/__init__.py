"""Speculation control: how much to speculate each step, from measured costs and acceptance
(docs/design.md section 13)."""
