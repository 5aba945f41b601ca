"""Clusters described by sites: a slurm.conf (with its gres.conf) or a short TOML file written by hand.

`read_cluster(path)` reads either (a `.toml` suffix picks TOML); errors name
the file, line and key (`ClusterConfigError`).
"""

from __future__ import annotations

from pathlib import Path

from simulator.cluster import Cluster
from simulator.clusterconf.settings import ClusterConfigError
from simulator.clusterconf.slurmconf import read_slurm_conf
from simulator.clusterconf.tomlform import read_cluster_toml

__all__ = ["ClusterConfigError", "read_cluster", "read_cluster_toml", "read_slurm_conf"]


def read_cluster(path: str | Path) -> Cluster:
    """The cluster a slurm.conf or a TOML cluster file describes."""
    path = Path(path)
    if path.suffix.lower() == ".toml":
        return read_cluster_toml(path)
    return read_slurm_conf(path)
