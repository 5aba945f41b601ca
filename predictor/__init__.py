"""Runtime estimators for HPC batch jobs, and the gRPC service that serves them.

The estimators are pure: they learn only from jobs they are told have finished
(`observe`) and answer for a job at its submission (`predict`).
"""
