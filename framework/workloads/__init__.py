"""Benchmark workloads: published prompt suites (Hydra group `workload=`) and how their prompts are rendered."""
