"""The shared kernel: job types, errors, durations and the SPEC grammar that every layer above speaks."""
