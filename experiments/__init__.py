"""Hydra apps: run, compare, check, train, benchmarks and reports (`python -m experiments.<name>`); their
library is measurement/.

Importing the package registers the resolver their configs name for run folders: `${unique_dir:base}` is
`base`, or `base_2`, ... if another run took it first (framework.core.files.fresh_folder); under torchrun, ranks
other than 0 get a temporary folder (framework.lm.sharding.run_folder): rank 0 writes the results."""

from omegaconf import OmegaConf

from framework.lm.sharding import run_folder

OmegaConf.register_new_resolver("unique_dir", run_folder, use_cache=True, replace=True)
