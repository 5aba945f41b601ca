"""Live accuracy and the Prometheus metrics of a real server, scraped over real HTTP, and `tsched status`."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_support import Certificates, status_of, write_secret

from kernel.errors import UsageError
from kernel.jobs import FinishedJob, JobRequest, Prediction
from predictor.service.client import Credentials, PredictorClient
from predictor.service.limits import Limits
from predictor.service.live import SUBMIT_SLACK_SECONDS, LiveScores
from predictor.service.metrics import parse_metrics_listen
from predictor.service.server import PredictorServer, Security, start_server
from tsched.cli import main

TOKEN = "s" * 40
SPEC = "percentile:min_jobs=3,floor=0"  # no floor: estimates may go down to the 10% used


def _prediction(t_sched: int, fallback: bool = False) -> Prediction:
    return Prediction(t_sched, None, 0, fallback)


def test_a_completion_is_scored_against_its_own_prediction() -> None:
    live = LiveScores(window=3, pending=100)
    asked = [JobRequest(0, 100 + i, user=1, group=1, t_req=1000, procs=2) for i in range(4)]
    live.predicted("e", asked, [_prediction(500), _prediction(100), _prediction(4000 // 4), _prediction(1000, True)])
    # The first job was refused after the question: the second's completion skips it (submit too far off).
    second = asked[1]._replace(job_id=77, submit=asked[1].submit + SUBMIT_SLACK_SECONDS)
    live.completed([FinishedJob(second, 900, 200)])
    (summary,) = live.summaries()
    assert (summary.scored, summary.accuracy, summary.underestimated, summary.pending) == (1, 0.5, 1.0, 2)
    live.completed([FinishedJob(asked[2], 2000, 1000), FinishedJob(asked[3], 2000, 250)])
    (summary,) = live.summaries()
    assert summary.scored == 3 and summary.fallbacks == pytest.approx(1 / 3)
    assert summary.accuracy == pytest.approx((0.5 + 1.0 + 0.25) / 3)
    live.completed([FinishedJob(asked[0], 3000, 10)])  # no prediction waits for it any more
    assert live.summaries()[0].scored == 3 and live.pending == 0


def test_predictions_never_matched_are_dropped_oldest_first() -> None:
    live = LiveScores(window=10, pending=5)
    for user in range(20):
        live.predicted("e", [JobRequest(0, user, user, 1, 100, 1)], [_prediction(50)])
    assert live.pending == 5
    live.completed([FinishedJob(JobRequest(0, 19, 19, 1, 100, 1), 100, 60)])
    live.completed([FinishedJob(JobRequest(0, 0, 0, 1, 100, 1), 100, 60)])  # dropped long ago
    assert live.summaries()[0].scored == 1 and live.pending == 4
    fresh = LiveScores(window=10, pending=5)
    batch = [JobRequest(0, 1000 + i * 60, 7, 1, 100, 1) for i in range(12)]  # more than fit: the last 5 stay
    fresh.predicted("f", batch, [_prediction(50)] * 12)
    assert fresh.pending == 5
    fresh.completed([FinishedJob(batch[6], 2000, 60), FinishedJob(batch[7], 2000, 60)])
    assert fresh.summaries()[0].scored == 1 and fresh.pending == 4  # job 6 was dropped, job 7 kept


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_secret(tmp_path_factory.mktemp("tokens") / "tokens", f"{TOKEN} site-*\n")


@pytest.fixture(scope="module")
def served(certificates: Certificates, tokens: Path) -> Iterator[PredictorServer]:
    security = Security(
        tls_cert=str(certificates.server_cert), tls_key=str(certificates.server_key), tokens=str(tokens)
    )
    running, _ = start_server(
        "127.0.0.1:0",
        default_estimators=[SPEC],
        security=security,
        limits=Limits(live_window=50, metrics_namespaces=2),
        metrics_listen="127.0.0.1:0",
    )
    yield running
    running.stop(0).wait()


def _scrape(server: PredictorServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert server.metrics is not None
    with urllib.request.urlopen(f"http://{server.metrics.address}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _site(server: PredictorServer, certificates: Certificates, namespace: str, share: float, jobs: int) -> None:
    """A user whose jobs use `share` of their hour, each asked about at submission and reported at its end."""
    credentials = Credentials(token=TOKEN, tls=True, tls_ca=certificates.ca.read_bytes())
    with PredictorClient(f"localhost:{server.port}", timeout=5, credentials=credentials) as client:
        for index in range(jobs):
            submit = 1_000_000 + index * 7200
            job = JobRequest(0, submit, user=5, group=2, t_req=3600, procs=8)
            client.predict_job(job, namespace=namespace)
            # The scheduler numbered the job after asking, and its submit time is a second later.
            ended = job._replace(job_id=index + 1, submit=submit + 1)
            client.observe(
                [FinishedJob(ended, submit + 10 + int(3600 * share), int(3600 * share))], namespace=namespace
            )


def test_the_metrics_endpoint_serves_calls_and_live_accuracy(served: PredictorServer, certificates) -> None:
    _site(served, certificates, "site-a", 0.1, 40)
    _site(served, certificates, "site-b", 1.0, 5)
    _site(served, certificates, "site-c", 0.5, 3)  # fewest completions: beyond --metrics-namespaces 2
    credentials = Credentials(token=TOKEN, tls=True, tls_ca=certificates.ca.read_bytes())
    with PredictorClient(f"localhost:{served.port}", timeout=5, credentials=credentials) as client:
        code, _ = status_of(lambda: client.observe([], namespace="other"))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    metrics = _scrape(served)
    assert metrics["tsched_namespaces", ()] == 3
    a, b = (("namespace", "site-a"),), (("namespace", "site-b"),)
    assert metrics["tsched_history_completions", a] == 40 and metrics["tsched_history_completions", b] == 5
    assert ("tsched_history_completions", (("namespace", "site-c"),)) not in metrics
    # The first question of each namespace came before it existed: nothing to score it against later.
    # Then t_req while the namespace held fewer than min_jobs=3 completions.
    assert metrics["tsched_predictions_total", a] == 39 and metrics["tsched_fallbacks_total", a] == 2
    canonical = next(key for key in metrics if key[0] == "tsched_live_accuracy" and ("namespace", "site-a") in key[1])
    labels = canonical[1]
    assert metrics["tsched_live_scored", labels] == 39
    # Once it has history the adjuster answers near the 10% of the request these jobs use.
    assert metrics["tsched_live_accuracy", labels] > 0.8
    assert metrics["tsched_live_underestimated_ratio", labels] == 0
    assert metrics["tsched_live_bad_estimate_ratio", labels] == 0
    assert metrics["tsched_calls_total", (("code", "OK"), ("rpc", "Predict"))] == 48
    assert metrics["tsched_calls_total", (("code", "PERMISSION_DENIED"), ("rpc", "ObserveCompletions"))] == 1
    assert metrics["tsched_call_seconds_count", (("rpc", "Predict"),)] == 48
    assert metrics["tsched_training_runs_total", ()] == 0


def test_status_prints_the_same_as_a_table(served, certificates, tmp_path: Path, capsys) -> None:
    _site(served, certificates, "site-d", 0.1, 20)
    token = write_secret(tmp_path / "token", TOKEN + "\n")
    options = ["--address", f"localhost:{served.port}", "--token-file", str(token), "--tls-ca"]
    assert main(["status", *options, str(certificates.ca), "--namespace", "site-d", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["namespace_exists"] and status["completions"] == 20
    (estimator,) = status["estimators"]
    assert estimator["scored"] == 19 and estimator["accuracy"] > 0.7
    metrics = _scrape(served)
    assert estimator["estimator"].startswith("percentile:key=user+group+request,")  # the full SPEC
    labels = (("estimator", "percentile"), ("namespace", "site-d"))  # the label: the estimator's name
    assert estimator["accuracy"] == pytest.approx(metrics.get(("tsched_live_accuracy", labels), estimator["accuracy"]))
    assert main(["status", *options, str(certificates.ca), "--namespace", "site-d"]) == 0
    table = capsys.readouterr().out
    assert "namespace site-d: 20 completions held" in table and "\npercentile " in table
    assert "Predict" not in table  # a token of some namespaces sees no server-wide call counts (issue 25)


def test_an_unscored_estimator_has_no_data_and_a_short_label(capsys: pytest.CaptureFixture[str]) -> None:
    """A fresh estimator exported accuracy 0.0 (an alert on low accuracy fired on every new namespace), and its
    label was the full SPEC (about 230 characters for a model)."""
    specs = ["percentile:q=85", "percentile:q=70", "last2"]
    running, port = start_server("127.0.0.1:0", default_estimators=specs, metrics_listen="127.0.0.1:0")
    try:
        with PredictorClient(f"127.0.0.1:{port}", timeout=30) as client:
            client.observe([FinishedJob(JobRequest(1, 100, 5, 2, 3600, 8), 500, 400)], namespace="fresh")
            for spec in specs:  # asked, not yet completed: nothing scored
                client.predict_job(JobRequest(2, 600, 5, 2, 3600, 8), namespace="fresh", estimator=spec)
        metrics = _scrape(running)
        assert main(["status", "--address", f"127.0.0.1:{port}", "--namespace", "fresh", "--timeout", "30"]) == 0
        table = capsys.readouterr().out
    finally:
        running.stop(0).wait()
    scored = {dict(key[1])["estimator"]: value for key, value in metrics.items() if key[0] == "tsched_live_scored"}
    assert set(scored.values()) == {0} and "last2" in scored
    two = sorted(label for label in scored if label.startswith("percentile#"))
    assert len(two) == 2 and all(len(label) == len("percentile#") + 8 for label in two)
    per_estimator = [key for key in metrics if key[0].startswith("tsched_live_") and "estimator" in dict(key[1])]
    assert {key[0] for key in per_estimator} == {"tsched_live_scored"}  # no accuracy, no shares: "no data"
    row = next(line for line in table.splitlines() if line.startswith("last2 "))
    assert row.split()[1:6] == ["0", "-", "-", "-", "-"] and "0.000" not in table


def test_metrics_are_off_unless_asked_and_refuse_a_bad_address() -> None:
    running, _ = start_server("127.0.0.1:0")
    try:
        assert running.metrics is None
    finally:
        running.stop(0).wait()
    assert parse_metrics_listen("9464") == ("127.0.0.1", 9464)
    assert parse_metrics_listen("[::1]:9464") == ("::1", 9464)
    with pytest.raises(UsageError, match="metrics-listen"):
        parse_metrics_listen("host:http")
