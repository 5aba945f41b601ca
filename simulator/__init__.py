"""Trace-driven scheduling simulator: traces (SWF, Slurm sacct, PBS), a synthetic workload, policies, backfilling.

For notebooks, the main objects are importable from here (docs/python-api.md):
`read_trace` reads any trace format into a `Trace` (pandas DataFrames
`records` and `jobs`), `simulate` / `run_simulation` replay it under a
`SimulationConfig` (`run_simulation` sums the run up in a `RunSummary`),
`frontier_plot` draws estimators' accuracy against their underestimation.
They are imported on first use, so `import simulator` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel.lazy import lazy_exports

if TYPE_CHECKING:
    from simulator.engine import SimulationConfig, SimulationResult, simulate
    from simulator.evaluation.plots import frontier_plot
    from simulator.experiment import run_simulation
    from simulator.summary import RunSummary
    from simulator.workloads.formats import TRACE_FORMATS, convert_trace, detect_format, read_trace
    from simulator.workloads.info import trace_info
    from simulator.workloads.sacct import SACCT_COMMAND, SACCT_FIELDS
    from simulator.workloads.sitelog import SiteLogOptions
    from simulator.workloads.swf import read_swf, write_swf
    from simulator.workloads.synthetic import default_workload, generate_workload
    from simulator.workloads.trace import JOB_COLUMNS, RECORD_COLUMNS, SWFHeader, Trace

#: Public name -> the module that defines it.
_EXPORTS = {
    "read_trace": "simulator.workloads.formats",
    "detect_format": "simulator.workloads.formats",
    "convert_trace": "simulator.workloads.formats",
    "TRACE_FORMATS": "simulator.workloads.formats",
    "SiteLogOptions": "simulator.workloads.sitelog",
    "SACCT_COMMAND": "simulator.workloads.sacct",
    "SACCT_FIELDS": "simulator.workloads.sacct",
    "Trace": "simulator.workloads.trace",
    "SWFHeader": "simulator.workloads.trace",
    "RECORD_COLUMNS": "simulator.workloads.trace",
    "JOB_COLUMNS": "simulator.workloads.trace",
    "read_swf": "simulator.workloads.swf",
    "write_swf": "simulator.workloads.swf",
    "trace_info": "simulator.workloads.info",
    "generate_workload": "simulator.workloads.synthetic",
    "default_workload": "simulator.workloads.synthetic",
    "SimulationConfig": "simulator.engine",
    "SimulationResult": "simulator.engine",
    "simulate": "simulator.engine",
    "run_simulation": "simulator.experiment",
    "RunSummary": "simulator.summary",
    "frontier_plot": "simulator.evaluation.plots",
}
__all__ = [
    "JOB_COLUMNS",
    "RECORD_COLUMNS",
    "SACCT_COMMAND",
    "SACCT_FIELDS",
    "TRACE_FORMATS",
    "RunSummary",
    "SWFHeader",
    "SimulationConfig",
    "SimulationResult",
    "SiteLogOptions",
    "Trace",
    "convert_trace",
    "default_workload",
    "detect_format",
    "frontier_plot",
    "generate_workload",
    "read_swf",
    "read_trace",
    "run_simulation",
    "simulate",
    "trace_info",
    "write_swf",
]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS, __all__)
