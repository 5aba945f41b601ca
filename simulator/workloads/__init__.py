"""Workloads: the trace formats read (SWF, Slurm sacct, PBS accounting), load scaling, replicates, the
synthetic workload."""
