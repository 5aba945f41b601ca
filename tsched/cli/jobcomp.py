"""`tsched-slurm-jobcomp --follow SPOOL`: report the completions Slurm's jobcomp/script spools to a running
service (`sites.slurm.Follower` does the work; this is its command line)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from predictor.service.client import DEFAULT_TIMEOUT_SECONDS, PredictorClient
from sites.slurm import Follower
from tsched.cli.options import add_connection_options, credentials_from, positive_number


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tsched-slurm-jobcomp", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--follow", required=True, type=Path, metavar="SPOOL", help="the spool jobcomp.sh appends to")
    parser.add_argument("--address", required=True, metavar="HOST:PORT|unix:PATH", help="the predictor service")
    parser.add_argument("--namespace", default="", help="the cluster's namespace (default: the server's default)")
    parser.add_argument(
        "--timeout", type=positive_number, default=DEFAULT_TIMEOUT_SECONDS, help="seconds each report may take"
    )
    add_connection_options(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s tsched-slurm-jobcomp: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: stop.set())
    with PredictorClient(args.address, args.timeout, credentials_from(args)) as client:
        Follower(args.follow, lambda jobs: client.observe(jobs, namespace=args.namespace)).run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
