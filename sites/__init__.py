"""Adapters that connect a site's batch system to the predictor service (deploy/ holds the scheduler-side files)."""
