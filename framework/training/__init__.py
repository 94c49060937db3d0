"""What every drafter trains with: the data-parallel, resumable loop (accelerate) and the distillation losses."""
