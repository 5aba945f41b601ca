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

from sites.slurm import Follower
from tsched.cli.client import connect
from tsched.cli.options import CLUSTER_NAMESPACE_HELP, service_group
from tsched.cli.spec import HelpFormatter, Option, add_options


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tsched-slurm-jobcomp", description=(__doc__ or "").splitlines()[0], formatter_class=HelpFormatter
    )
    spool = Option("--follow", "the spool jobcomp.sh appends to", Path, metavar="SPOOL", required=True)
    add_options(parser, (spool, service_group("seconds each report may take", namespace_help=CLUSTER_NAMESPACE_HELP)))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s tsched-slurm-jobcomp: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: stop.set())
    with connect(args) as client:
        Follower(args.follow, lambda jobs: client.observe(jobs, namespace=args.namespace)).run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
