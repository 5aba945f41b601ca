"""PBS's accounting logs to a running service (`tsched pbs-report`, from cron).

Users and groups go by name, as the queuejob hook (deploy/pbs/tsched_queuejob.py)
asks about them and as `tsched observe` sends any site log (`sites.seeding`);
times are Unix seconds, as the PBS reader keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from predictor.digests import files_of
from predictor.service.client import PredictorClient
from simulator.workloads.pbs import read_pbs
from sites.seeding import Seeded, seed, trace_completions


def report_accounting(
    paths: Sequence[str], client: PredictorClient, namespace: str, progress: Callable[[Seeded], None] = lambda _: None
) -> Seeded:
    """Send the jobs of PBS accounting logs to `namespace`, in chunks (what was new, already held).

    Each path is a log file or a folder of them (PBS's `server_priv/accounting`, one file a day), read in
    name order: the documented cron line names the folder.
    """
    files = [file for path in paths for file in files_of(path)]
    trace = read_pbs(files, lenient=True).require_jobs()
    finished, names = trace_completions(trace.jobs, trace.names)
    return seed(client, namespace, finished, names, progress)
