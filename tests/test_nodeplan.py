"""Slurm's start estimates (grouped running ends) and its backfill map of whole-node reservations, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kernel.resources import ResourceRequest
from simulator.cluster import Cluster, Node, Partition, SelectSettings
from simulator.nodeplan import NodeSpace, RunningEnd, earliest_start, guess_end
from simulator.nodes import Allocation, NodeState, NodeTable, demand, from_bits, to_bits

FOUR = Cluster(
    "four",
    nodes=tuple(Node(f"n{i}", 1) for i in (1, 2, 3, 4)),
    partitions=(Partition("p", (0, 1, 2, 3), default=True),),
    select=SelectSettings(unit="cpu", memory=False),
)


def running(*jobs: tuple[int, int]) -> tuple[NodeState, list[RunningEnd]]:
    """One-CPU jobs (node index, expected end) on the four nodes; the ends earliest first."""
    state = NodeState(NodeTable(FOUR))
    ends = []
    for key, (node, end) in enumerate(jobs, start=1):
        state.allocate(key, Allocation(np.array([node]), np.array([1]), np.array([0]), np.array([0])))
        ends.append(RunningEnd(end, key))
    return state, sorted(ends)


def estimate(state: NodeState, ends: list[RunningEnd], nodes: int, now: int = 50, available=None, **kwargs) -> tuple:
    job = demand(ResourceRequest(tasks=nodes), FOUR, FOUR.partitions[0])
    mask = np.ones(4, dtype=bool) if available is None else np.array(available)
    found = earliest_start(job, state, ends, to_bits(mask), now, **kwargs)
    return None if found is None else (found.start, [FOUR.nodes[i].name for i in found.allocation().nodes])


def test_it_starts_now_when_it_fits_now():
    state, ends = running((0, 100))
    assert estimate(state, ends, 3) == (50, ["n2", "n3", "n4"])


def test_running_ends_are_freed_in_windows_and_the_start_is_the_last_end_of_the_batch():
    state, ends = running((0, 100), (1, 125), (2, 200), (3, 1000))
    # first batch: ends up to the 30 s boundary after 100 (120) plus 30 s: 100 and 125 -> 2 nodes at 125
    assert estimate(state, ends, 2) == (125, ["n1", "n2"])
    # one node would be free at 100, but the batch ends at 125: Slurm's estimate is the later one
    assert estimate(state, ends, 1) == (125, ["n1"])
    # the window doubles until it takes in 200: the second batch is {200} -> 3 nodes at 200
    assert estimate(state, ends, 3) == (200, ["n1", "n2", "n3"])
    assert estimate(state, ends, 4) == (1000, ["n1", "n2", "n3", "n4"])


def test_a_boundary_end_opens_the_next_window():
    # 90 is on a 30 s boundary: the first window ends at 120 + 30 = 150, so 150 is in it and 151 is not
    state, ends = running((0, 90), (1, 150), (2, 151), (3, 1000))
    assert estimate(state, ends, 2) == (150, ["n1", "n2"])
    assert estimate(state, ends, 3) == (151, ["n1", "n2", "n3"])


def test_jobs_on_other_nodes_are_skipped_and_let_the_next_end_into_the_batch():
    state, ends = running((0, 100), (1, 125), (2, 500), (3, 1000))
    only = [True, False, True, False]  # n2 is not usable (reserved, another partition)
    # n1's job ends at 100; the next (125, on n2) is in the window but skipped, and Slurm's loop then takes
    # the following job (500, on n3) whatever its end: the batch is {100, 500}
    assert estimate(state, ends, 1, available=only) == (500, ["n1"])
    assert estimate(state, ends, 2, available=only) == (500, ["n1", "n3"])
    assert estimate(state, ends, 2, available=[False, False, True, True]) == (1000, ["n3", "n4"])
    assert estimate(state, ends, 3, available=only) is None


def test_linear_windows_instead_of_doubling():
    state, ends = running((0, 100), (1, 200), (2, 260), (3, 400))
    # doubling: batches {100}, {200} (window 120), {260} (window 240; 400 is past 120 + 240)
    assert estimate(state, ends, 3) == (260, ["n1", "n2", "n3"])
    assert estimate(state, ends, 2) == (200, ["n1", "n2"])
    # bf_window_linear=200: windows 30, 230 -> {200, 260} in one batch after {100}
    assert estimate(state, ends, 2, window_scale=200) == (260, ["n1", "n2"])


def test_jobs_past_their_expected_end_are_guessed():
    state, ends = running((0, 40), (1, 1000), (2, 1000), (3, 1000))
    assert estimate(state, ends, 1) == (70, ["n1"])  # 40 + KillWait 30
    assert estimate(state, ends, 1, kill_wait=5) == (51, ["n1"])  # 45 is past: now + 1
    assert guess_end(RunningEnd(40, 1, limit=600, over_time=2), 50, 30) == 190
    assert guess_end(RunningEnd(40, 1, limit=600, over_time=None), 50, 30) == 650
    assert guess_end(RunningEnd(40, 1, limit=None, over_time=None), 50, 30) == 50 + 365 * 86400


def test_bit_sets_round_trip():
    mask = np.zeros(130, dtype=bool)
    mask[[0, 7, 8, 64, 129]] = True
    bits = to_bits(mask)
    assert bits == (1 << 0) | (1 << 7) | (1 << 8) | (1 << 64) | (1 << 129)
    assert (from_bits(bits, 130) == mask).all()


ALL = 0b1111


def test_the_backfill_map_starts_as_one_record_rounded_to_the_resolution():
    space = NodeSpace(now=1005, window=3600, resolution=60, available=ALL)
    assert space.records() == [(960, 4560, ALL)]
    assert space.window_end == 4560


def test_a_reservation_holds_whole_nodes_and_its_start_is_inclusive_for_later_jobs():
    space = NodeSpace(now=1005, window=3600, resolution=60, available=ALL)
    space.reserve(1200, 1800, 0b0011)
    assert space.records() == [(960, 1200, ALL), (1200, 1800, 0b1100), (1800, 4560, ALL)]
    # a job ending at 1200 overlaps the reservation beginning at 1200: only n3, n4 are free for it
    assert space.free_over(1000, 1200, ALL) == (0b1100, 1800)
    # ending a second earlier it may use every node (the later start is computed all the same)
    assert space.free_over(1000, 1199, ALL) == (ALL, 1800)
    assert space.free_over(1800, 2000, ALL) == (ALL, 0)
    assert space.free_over(1000, 5000, 0b0110) == (0b0100, 1800)
    # the overlap test of a chosen node set treats the end as exclusive
    assert not space.overlaps(0b0001, 1100, 1200)
    assert space.overlaps(0b0001, 1100, 1201)
    assert not space.overlaps(0b0100, 0, 5000)


def test_reservations_split_merge_and_clip():
    space = NodeSpace(now=1000, window=3000, resolution=60, available=ALL)
    space.reserve(1800, 2400, 0b0011)
    space.reserve(1200, 1800, 0b0011)  # the same nodes just before: the two records merge
    assert space.records() == [(960, 1200, ALL), (1200, 2400, 0b1100), (2400, 3960, ALL)]
    space.reserve(1500, 1500, 0b0100)  # at least one resolution long
    assert space.records()[1:4] == [(1200, 1500, 0b1100), (1500, 1560, 0b1000), (1560, 2400, 0b1100)]
    space.reserve(0, 990, 0b1000)  # before the map: from its start
    assert space.records()[0] == (960, 1020, 0b0111)
    space.reserve(3900, 9000, 0b0001)  # past the window end: clipped
    assert space.records()[-1] == (3900, 3960, 0b1110)
    before = space.records()
    space.reserve(3960, 9999, ALL)  # wholly past the map: nothing changes
    assert space.records() == before


@pytest.mark.parametrize("start", [960, 1000, 1020])
def test_a_later_start_is_where_more_usable_nodes_come_free(start):
    space = NodeSpace(now=960, window=3000, resolution=60, available=ALL)
    space.reserve(960, 1500, 0b0001)
    space.reserve(1200, 2000, 0b0010)
    # n1 is reserved until 1500 and n2 from 1200 to 2000: a job over [start, 1600] has n3 and n4; the
    # first record boundary after which a usable node comes free is 1500 (n1), not 1200 (n2 goes then)
    free, later = space.free_over(start, 1600, ALL)
    assert free == 0b1100 and later == 1500
