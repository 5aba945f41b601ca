"""PBS's side of the predictor: how users and groups, known to PBS by name, are numbered.

The queuejob hook (deploy/pbs/tsched_queuejob.py) runs in PBS's own Python,
where tsched is not installed, and carries a copy of `name_id`; a test checks
that the two agree.
"""

from __future__ import annotations

import zlib


def name_id(name: str) -> int:
    """A user or group name as the non-negative number the predictor keys it by (the same on every host)."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF
