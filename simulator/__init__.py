"""Trace-driven scheduling simulator: SWF traces, a synthetic workload, queue policies and backfilling."""
