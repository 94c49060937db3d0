"""Hydra entry points: run, compare, check, train, benchmarks and reports (`python -m experiments.<name>`).

Importing the package registers the resolver their configs name for run folders: `${unique_dir:base}` is
`base`, or `base_2`, ... if another run took it first (framework.core.files.fresh_folder)."""

from omegaconf import OmegaConf

from framework.core.files import fresh_folder

OmegaConf.register_new_resolver("unique_dir", fresh_folder, use_cache=True, replace=True)
