"""The self-tuning `adaptive` estimator: its choice rule, its causality, its binding to the run's scheduler, and the
estimator contract."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest

from kernel.errors import SpecError, UsageError
from kernel.jobs import JobRequest
from predictor.estimators.checks import check_estimator, contract_workload
from predictor.registry import available as predictor_estimators
from predictor.service.client import PredictorClient
from predictor.service.remote import RemoteSession
from predictor.service.server import start_server
from predictor.service.specs import registry_factory
from predictor.session import LocalSession
from simulator.adaptive import MIN_REPLAY_JOBS, AdaptiveEstimator, decide
from simulator.engine import SimulationConfig, TraceReplay
from simulator.estimators import available, bind_scheduler, make_estimator, with_simulated
from simulator.workloads.synthetic import generate_workload
from tsched.cli import main

#: A cheap adaptive for tests: last2 as the one challenger of the request, short windows, two replicates.
FAST = "adaptive:candidates=last2,window=14d,retrain=5d,replicates=2"
CONFIG = SimulationConfig(64, "fcfs", "easy", "regular", "request", "sjf", None)


# --- the choice -------------------------------------------------------------------------------


def test_a_challenger_within_the_noise_does_not_replace_the_current_choice() -> None:
    # rows: request, current (1), challenger (2); the challenger wins by 1 on the mean, the paired spread is 2
    scores = np.array([[100.0, 100.0, 100.0], [90.0, 92.0, 88.0], [91.0, 89.0, 87.0]])
    assert decide(scores, 1, 0.0)[0] == 1
    assert decide(scores, 1, 0.0)[1] == pytest.approx(np.std([-1.0, 3.0, 1.0], ddof=1))


def test_a_challenger_beyond_the_noise_and_the_least_gain_replaces_it() -> None:
    scores = np.array([[100.0, 100.0, 100.0], [90.0, 92.0, 88.0], [80.0, 81.0, 79.0]])
    assert decide(scores, 1, 0.0)[0] == 2
    assert decide(scores, 1, 0.2)[0] == 1  # a 11% gain is not the 20% asked for


def test_nothing_worse_than_the_request_is_adopted_and_a_current_choice_that_is_goes_at_once() -> None:
    worse = np.array([[50.0, 51.0], [60.0, 61.0]])
    assert decide(worse, 0, 0.0)[0] == 0
    assert decide(worse, 1, 0.0)[0] == 0  # the current choice did harm: dropped without a noise test


def test_candidates_left_out_of_the_other_replicates_are_not_eligible() -> None:
    scores = np.array([[100.0, 100.0], [70.0, np.nan], [90.0, 91.0]])
    assert decide(scores, 0, 0.0)[0] == 2


# --- the estimator in a simulation ------------------------------------------------------------


def replay(jobs, spec: str = FAST) -> tuple[AdaptiveEstimator, object]:
    estimator = make_estimator(bind_scheduler(spec, CONFIG))
    assert isinstance(estimator, AdaptiveEstimator)
    result = TraceReplay(jobs, CONFIG, LocalSession(estimator)).replay()
    return estimator, result


@pytest.fixture(scope="module")
def workload():
    return generate_workload(jobs=2500, procs=64, load=0.9, seed=3).jobs


@pytest.mark.slow
def test_it_retunes_on_replays_and_serves_what_it_chose(workload) -> None:
    estimator, result = replay(workload)
    decisions = estimator.decisions
    assert len(decisions) >= 3
    assert all(decision.jobs >= MIN_REPLAY_JOBS for decision in decisions)
    assert all(set(decision.scores) == {"request", "last2"} for decision in decisions)
    assert all(decision.scores["request"] >= 1.0 for decision in decisions)  # an AVEbsld
    # whatever it chose, it never chose something the replay scored worse than the request
    assert all(
        decision.choice == "request" or decision.scores[decision.choice] <= decision.scores["request"]
        for decision in decisions
    )
    served = result.jobs["t_sched"].to_numpy()
    assert (served <= result.jobs["t_req"].to_numpy()).all()


@pytest.mark.slow
def test_future_runtimes_poisoned_leave_every_earlier_choice_unchanged(workload) -> None:
    honest, _ = replay(workload)
    cut = honest.decisions[len(honest.decisions) // 2].time
    poisoned = workload.copy()
    later = poisoned["submit"] > cut
    poisoned.loc[later, "t_act"] = poisoned.loc[later, "t_req"]  # every later job runs to its request
    told, _ = replay(poisoned)
    before = [decision for decision in honest.decisions if decision.time <= cut]
    assert before == [decision for decision in told.decisions if decision.time <= cut]
    assert honest.decisions != told.decisions  # the poison is real: the later retunings saw it


def test_the_run_binds_its_scheduler_where_the_spec_leaves_it_out() -> None:
    config = SimulationConfig(128, "wfp", "easy", "selective", "tsafrir", "queue", 7200)
    bound = make_estimator(bind_scheduler("adaptive:objective=wait,backfill_order=sjf", config))
    assert isinstance(bound, AdaptiveEstimator)
    assert bound.scheduler() == SimulationConfig(128, "wfp", "easy", "selective", "tsafrir", "sjf", 7200)
    assert bound.objective == "wait"
    assert bind_scheduler("last2", config) == "last2"
    with pytest.raises(SpecError, match="dynp"):
        bind_scheduler("adaptive", SimulationConfig(128, "dynp:variant=basic"))


def test_unbound_it_refuses_to_predict_and_the_service_refuses_it() -> None:
    with pytest.raises(UsageError, match="procs=0"):
        make_estimator("adaptive").predict(JobRequest(1, 0, 1, 1, 3600, 4))
    factory = with_simulated(lambda spec: (make_estimator(spec), spec))
    with pytest.raises(SpecError, match="procs=N"):
        factory("adaptive")
    estimator, canonical = factory("adaptive:procs=64")
    assert isinstance(estimator, AdaptiveEstimator)
    assert canonical == estimator.spec
    assert factory("last2")[1] == "last2"


def test_the_simulators_registry_holds_the_predictors_and_adaptive() -> None:
    assert set(available()) == {*predictor_estimators(), "adaptive"}
    with pytest.raises(SpecError, match="no parameter"):
        make_estimator("adaptive:nonsense=1")
    with pytest.raises(SpecError, match="candidates"):
        make_estimator("adaptive:candidates=last2+oracle")


@pytest.mark.slow
def test_adaptive_passes_the_estimator_contract() -> None:
    spec = "adaptive:candidates=last2,window=10d,retrain=10d,replicates=1,procs=48"  # few replays: it runs many
    check_estimator(make_estimator(spec), contract_workload(), make_estimator)


@pytest.mark.slow
def test_the_service_serves_it_and_shows_its_choice_and_replay_scores(workload, capsys) -> None:
    """Through `tsched serve`'s factory on a loopback port: the answers are the in-process run's, and Status, the
    `status` command's table and the metrics show the candidate served and the latest replay's scores."""
    spec = bind_scheduler(FAST, CONFIG)
    local, in_process = replay(workload)
    running, port = start_server(
        "127.0.0.1:0", estimator_factory=with_simulated(registry_factory), metrics_listen="127.0.0.1:0"
    )
    try:
        session = RemoteSession(f"127.0.0.1:{port}", "site", spec, reset=True, timeout=60)
        remote = TraceReplay(workload, CONFIG, session).replay()
        session.close()
        assert remote.jobs["t_sched"].equals(in_process.jobs["t_sched"])
        with PredictorClient(f"127.0.0.1:{port}", timeout=60) as client:
            status = client.status("site")
        assert {(call.rpc, call.code) for call in status.calls} == {("ResetNamespace", "OK"), ("SyncStream", "OK")}
        (tuned,) = [row for row in status.estimators if row.choice]
        tuning = local.tuning()
        assert (tuned.choice, tuned.retunings, dict(tuned.replay_scores)) == (
            tuning.choice,
            tuning.retunings,
            tuning.scores,
        )
        assert tuning.retunings >= 3 and set(tuning.scores) == {"request", "last2"}
        assert main(["status", "--address", f"127.0.0.1:{port}", "--namespace", "site"]) == 0
        shown = capsys.readouterr().out
        assert f"serves {tuning.choice} after {tuning.retunings} retuning(s); latest replay: " in shown
        assert running.metrics is not None
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{running.metrics.port}/metrics", timeout=30).read()
        text = scraped.decode()
        assert f'tsched_tuning_choice{{candidate="{tuning.choice}",estimator="adaptive",namespace="site"}} 1.0' in text
        assert f'tsched_tuning_retunings{{estimator="adaptive",namespace="site"}} {float(tuning.retunings)}' in text
        assert text.count("tsched_tuning_replay_score{") == 2
    finally:
        running.stop(0).wait()
