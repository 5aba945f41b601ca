"""The security policy without a server: token files, grants, where a server may listen open, and the limits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kernel.errors import PermissionDenied, ResourceExhausted, UsageError
from predictor.proto import pb
from predictor.service.limits import REQUEST_EXPANSION, Admission, CallKind, Limits, MemoryWatch, Watchdog
from predictor.service.quoting import QUOTE_LIMIT, RefusalLog, clip, quote
from predictor.service.security import (
    ACCESS_BY_METHOD,
    Access,
    TokenTable,
    check_exposure,
    is_local,
    read_token_file,
)

ADMIN = "a" * 32
SIMULATION = "s" * 32
TABLE = f"""
# operators
{ADMIN} *  reset
{SIMULATION} sim-*,eval-?  # simulations only
"""


def test_tokens_grant_their_globs_and_reset_only_where_said() -> None:
    table = TokenTable.parse(TABLE, "tokens")
    admin, simulation = table.grant_for(f"Bearer {ADMIN}"), table.grant_for(f"bearer {SIMULATION}")
    assert admin is not None and simulation is not None
    assert admin.allows("anything", Access.RESET) and admin.allows("", Access.USE)
    assert simulation.allows("sim-42", Access.USE) and simulation.allows("eval-1", Access.USE)
    assert not simulation.allows("eval-12", Access.USE)  # ? is one character
    assert not simulation.allows("cluster-a", Access.USE)
    assert not simulation.allows("", Access.USE)  # the empty namespace is "default"
    assert not simulation.allows("sim-42", Access.RESET)
    with pytest.raises(PermissionDenied, match="may use it but not reset it"):
        simulation.check("sim-42", Access.RESET)
    with pytest.raises(PermissionDenied, match="outside this token's namespaces"):
        simulation.check("cluster-a", Access.USE)
    assert simulation.holder == "tokens:4"


@pytest.mark.parametrize("header", [None, "", "Bearer", f"Basic {ADMIN}", f"Bearer {ADMIN}x", "Bearer " + "a" * 31])
def test_unknown_or_malformed_tokens_are_no_grant(header: str | None) -> None:
    assert TokenTable.parse(TABLE, "tokens").grant_for(header) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("short sim-*", "at least 16"),
        (f"{ADMIN}", "expected TOKEN"),
        (f"{ADMIN} * everything", "expected TOKEN"),
        (f"{ADMIN} sim-*,bad;glob", "namespace glob"),
        (f"{ADMIN} *\n{ADMIN} sim-*", "same token as line 1"),
        ("# nothing but comments", "no tokens"),
    ],
)
def test_bad_token_files_are_refused_by_line_without_showing_the_token(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as raised:
        TokenTable.parse(text, "tokens")
    assert ADMIN not in str(raised.value)


def test_client_token_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(f"# the scheduler's token\n\n  {ADMIN}  \n")
    assert read_token_file(path) == ADMIN
    path.write_text("# empty\n")
    with pytest.raises(UsageError, match="no token"):
        read_token_file(path)


def test_every_rpc_of_the_contract_has_an_access_rule() -> None:
    methods = set(pb.DESCRIPTOR.services_by_name["Predictor"].methods_by_name)
    assert set(ACCESS_BY_METHOD) == methods
    assert ACCESS_BY_METHOD["ResetNamespace"] is Access.RESET


@pytest.mark.parametrize(
    ("listen", "local"),
    [
        ("127.0.0.1:50051", True),
        ("127.8.9.10:1", True),
        ("[::1]:50051", True),
        ("localhost:50051", True),
        ("unix:/run/tsched.sock", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        ("192.0.2.7:50051", False),
    ],
)
def test_what_counts_as_this_machine_only(listen: str, local: bool) -> None:
    assert is_local(listen) is local


def test_listening_off_this_machine_needs_tls_or_tokens_unless_insecure() -> None:
    assert check_exposure("127.0.0.1:1", tls=False, tokens=False, insecure=False) == []
    with pytest.raises(UsageError, match="--insecure"):
        check_exposure("0.0.0.0:1", tls=False, tokens=False, insecure=False)
    assert "anyone who can connect" in check_exposure("0.0.0.0:1", tls=False, tokens=False, insecure=True)[0]
    assert "in clear" in check_exposure("0.0.0.0:1", tls=False, tokens=True, insecure=False)[0]
    assert check_exposure("0.0.0.0:1", tls=True, tokens=True, insecure=False) == []


def test_quoting_shows_a_few_hundred_characters_of_any_input() -> None:
    huge = "x" * 5_000_000
    assert len(quote(huge)) < QUOTE_LIMIT + 40 and "5,000,000 characters" in quote(huge)
    assert quote("short") == "'short'"
    assert len(clip("y" * 100_000)) <= 1000


def test_refusals_are_logged_at_a_bounded_rate(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    limited = RefusalLog(logging.getLogger("test.refusals"), per_second=2)
    with caplog.at_level(logging.INFO, "test.refusals"):
        for index in range(1000):
            limited.log(logging.WARNING, "refused %d", index)
        time.sleep(0.6)
        limited.log(logging.WARNING, "refused again")
    assert len(caplog.records) == 2
    assert "999 more refusals not logged" in caplog.records[-1].getMessage()


# --- the limits --------------------------------------------------------------------------------


def test_limits_refuse_nonsense() -> None:
    with pytest.raises(UsageError, match="--max-calls"):
        Limits(max_calls=0)
    with pytest.raises(UsageError, match="--stream-idle-timeout"):
        Limits(stream_idle_timeout=float("nan"))
    with pytest.raises(UsageError, match="--history-window"):
        Limits(history_window="forever")
    small = Limits(memory_limit_mb=64)
    with pytest.raises(UsageError, match="--max-batch"):
        small.check_message_size(10 * 2**20)


def test_admission_refuses_beyond_its_slots_and_gives_them_back() -> None:
    admission = Admission(Limits(max_calls=2, max_streams=1, client_share=1))
    with admission.slot(CallKind.CALL, "a") as first, admission.slot(CallKind.CALL, "b") as second:
        with admission.slot(CallKind.CALL, "c") as third:
            assert (first, second) == (None, None) and third is not None and "limit of 2 calls" in third
        with admission.slot(CallKind.STREAM, "a") as stream:
            assert stream is None  # streams have their own slots
    assert admission.in_use(CallKind.CALL) == 0


def test_admission_holds_each_client_to_its_share() -> None:
    admission = Admission(Limits(max_calls=4, client_share=0.5))
    with (
        admission.slot(CallKind.CALL, "hog") as first,
        admission.slot(CallKind.CALL, "hog") as second,
        admission.slot(CallKind.CALL, "hog") as third,
        admission.slot(CallKind.CALL, "other") as other,
    ):
        assert (first, second, other) == (None, None, None)
        assert third is not None and "share of 2 of the server's 4 calls" in third
        assert admission.in_use(CallKind.CALL, "hog") == 2
    assert admission.in_use(CallKind.CALL, "hog") == 0


def test_admission_budgets_the_memory_of_requests_in_flight() -> None:
    limits = Limits(memory_limit_mb=100)
    admission = Admission(limits)
    message = limits.request_budget_bytes // REQUEST_EXPANSION
    held = admission.reserve(message)
    assert held and not admission.reserve(1)  # the budget is taken
    admission.give_back(held)
    big = admission.reserve(message * 10)  # alone, even a message beyond the budget is served
    assert big
    admission.give_back(big)


def test_memory_watch_refuses_growth_above_its_ceiling() -> None:
    resident = [100 * 2**20]
    watch = MemoryWatch(200 * 2**20, sample=lambda: resident[0])
    watch.check_growth("namespace 'a'")
    resident[0] = 190 * 2**20
    time.sleep(0.15)
    with pytest.raises(ResourceExhausted, match="namespace 'a': the server's memory"):
        watch.check_growth("namespace 'a'")


def test_the_watchdog_cuts_a_call_waiting_on_its_client_and_spares_one_working() -> None:
    watchdog = Watchdog(send_timeout=0.3)
    cut = threading.Event()
    spared = threading.Event()
    try:
        with (
            watchdog.watching(cut.set, "stalled", receive_timeout=0.3) as stalled,
            watchdog.watching(spared.set, "busy", receive_timeout=0.3),
        ):
            stalled.sending()
            assert cut.wait(2)
            assert not spared.is_set()  # working (neither receiving nor sending): never cut
        assert watchdog.cut == 1
    finally:
        watchdog.stop()


def test_every_bound_is_documented_for_operators_with_its_default() -> None:
    import dataclasses

    page = (Path(__file__).resolve().parents[1] / "docs" / "service-operations.md").read_text()
    for item in dataclasses.fields(Limits):
        default = (
            " ".join(item.default)
            if isinstance(item.default, tuple)
            else f"{item.default:g}"
            if isinstance(item.default, float)
            else str(item.default)
        )
        assert f"| `--{item.name.replace('_', '-')}` | {default} |" in page, item.name


def test_serve_help_lists_every_bound(capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    from tsched.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert all(f"--{item.name.replace('_', '-')}" in shown for item in dataclasses.fields(Limits))
    assert "80% of it" in shown and "--tokens FILE" in shown and "--tls-client-ca" in shown
