"""deploy/slurm/tsched_client.lua, the client job_submit.lua and cli_filter.lua ask the predictor with, run by
Lua 5.1 (Debian's Slurm's) and curl against a real service and against servers that are not one: a question
costs at most its deadline and a few kilobytes, whatever answers at the address."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from predictor.proto import pb
from predictor.service.server import start_server

REPO = Path(__file__).resolve().parents[1]
CLIENT = REPO / "deploy" / "slurm" / "tsched_client.lua"
LUA = shutil.which("lua5.1")
pytestmark = pytest.mark.skipif(
    LUA is None or shutil.which("curl") is None, reason="needs lua5.1 and curl (apt-get install lua5.1 curl)"
)
DEADLINE_MS = 1000
T_REQ = 3600

#: Asks once, as job_submit.lua does, and prints the outcome on one line.
DRIVER = """
local tsched = dofile(arg[1])
local config = tsched.read_config("/nonexistent")
config.address, config.deadline_ms = arg[2], arg[3]
local answer, why = tsched.predict(config, { submit = 0, user = 1001, group = 1001, t_req = T_REQ, procs = 1 })
if answer == nil then
    print("nil " .. why)
else
    print("answer " .. tsched.comment(answer))
end
""".replace("T_REQ", str(T_REQ))


def ask(address: str) -> tuple[str, float]:
    """The client's one-line outcome for a question to `address`, and the seconds it took."""
    began = time.monotonic()
    done = subprocess.run(
        [str(LUA), "-", str(CLIENT), address, str(DEADLINE_MS)],
        check=False,
        input=DRIVER,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), time.monotonic() - began


def impostor(answer: Callable[[bytes, grpc.ServicerContext], bytes]) -> Iterator[str]:
    """A gRPC server that answers Predict with the bytes `answer` gives: not a tsched service."""
    server = grpc.server(futures.ThreadPoolExecutor(2))
    handler = grpc.method_handlers_generic_handler(
        "tsched.v1.Predictor", {"Predict": grpc.unary_unary_rpc_method_handler(answer)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0).wait()


@pytest.fixture(scope="module")
def honest() -> Iterator[tuple[str, float]]:
    """A real service, and how long the client takes to ask it on this machine now (the yardstick)."""
    running, port = start_server("127.0.0.1:0", default_estimators=["request"])
    address = f"127.0.0.1:{port}"
    ask(address)  # warm: the first call starts the estimator
    outcome, seconds = ask(address)
    assert outcome == f"answer tsched:t_sched={T_REQ},fallback=1"
    yield address, seconds
    running.stop(0).wait()


def test_a_real_service_answers(honest: tuple[str, float]) -> None:
    assert ask(honest[0])[0] == f"answer tsched:t_sched={T_REQ},fallback=1"


def _response(t_sched: int, quantiles: int = 0) -> bytes:
    quantile = [pb.Quantile(probability=0.9, runtime=t_sched)] * quantiles
    return pb.PredictResponse(prediction=pb.Prediction(t_sched=t_sched), quantiles=quantile).SerializeToString()


def test_a_huge_answer_is_cut_off_and_refused(honest: tuple[str, float]) -> None:
    """Once a 7 MB answer held job_submit.lua for 8.2 s and became a 7 MB admin comment."""
    huge = _response(60, quantiles=600_000)  # about 8 MB
    address = next(generator := impostor(lambda _request, _context: huge))
    try:
        outcome, seconds = ask(address)
    finally:
        next(generator, None)
    assert outcome.startswith("nil an answer over 4096 bytes")
    assert seconds < 2 * DEADLINE_MS / 1000 + 3 * honest[1]


@pytest.mark.parametrize(("t_sched", "quantiles"), [(10**12, 0), (0, 0), (60, 3)])
def test_an_answer_no_tsched_service_gives_is_refused(t_sched: int, quantiles: int) -> None:
    answer = _response(t_sched, quantiles)
    if quantiles:  # a quantile beyond the request
        answer = pb.PredictResponse(
            prediction=pb.Prediction(t_sched=t_sched), quantiles=[pb.Quantile(probability=0.9, runtime=10**9)]
        ).SerializeToString()
    address = next(generator := impostor(lambda _request, _context: answer))
    try:
        outcome, _ = ask(address)
    finally:
        next(generator, None)
    assert outcome.startswith("nil an answer no tsched service gives")


def test_a_server_that_never_answers_costs_the_deadline(honest: tuple[str, float]) -> None:
    release = threading.Event()

    def hang(_request: bytes, _context: grpc.ServicerContext) -> bytes:
        release.wait(30)
        return _response(60)

    address = next(generator := impostor(hang))
    try:
        outcome, seconds = ask(address)
    finally:
        release.set()
        next(generator, None)
    assert outcome == f"nil no answer within {DEADLINE_MS} ms"
    assert seconds < 2 * DEADLINE_MS / 1000 + 3 * honest[1]


def test_a_port_squatter_that_floods_bytes_costs_the_deadline(honest: tuple[str, float]) -> None:
    """Not HTTP/2 at all: a process that writes junk as fast as it can to whoever connects."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def flood() -> None:
        connection, _ = listener.accept()
        junk = b"\xff" * 65536
        try:
            while not stop.is_set():
                connection.sendall(junk)
        except OSError:
            pass
        finally:
            connection.close()

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    try:
        outcome, seconds = ask(f"127.0.0.1:{listener.getsockname()[1]}")
    finally:
        stop.set()
        listener.close()
        thread.join(5)
    assert outcome.startswith("nil ")
    assert seconds < 2 * DEADLINE_MS / 1000 + 3 * honest[1]


#: Prints the PredictRequest job_submit.lua sends for a job given by name (hex, without the gRPC frame).
NAMED_REQUEST = """
local tsched = dofile(arg[1])
local config = tsched.read_config("/nonexistent")
config.namespace = "cluster"
local job = { submit = 1795800000, user = 1070, user_name = arg[2], group = 1070, account = arg[3], t_req = 1800,
    procs = 2, job_name = arg[4] }
print((tsched.predict_request(config, job):sub(6):gsub(".", function(c) return string.format("%02x", c:byte()) end)))
"""


@pytest.mark.parametrize(
    ("user_name", "account", "job_name", "expected"),
    [
        ("mallory3", "proj6", "namd", {"user_name": "mallory3", "account": "proj6", "job_name": "namd"}),
        ("", "", "", {"user": 1070, "group": 1070}),  # no names (a UID without a passwd entry): the numbers
        ("bad name", "proj6", "my job", {"user": 1070, "account": "proj6"}),  # not plain names: left out
    ],
)
def test_job_submit_asks_by_the_names_the_site_history_is_keyed_by(
    user_name: str, account: str, job_name: str, expected: dict[str, object]
) -> None:
    """job_submit.lua sent the UID and the GID, which no sacct dump seeded namespace knows (issue 27); the job's
    name goes as jobcomp.sh writes it, where it is a plain one."""
    done = subprocess.run(
        [str(LUA), "-", str(CLIENT), user_name, account, job_name],
        input=NAMED_REQUEST,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    request = pb.PredictRequest.FromString(bytes.fromhex(done.stdout.strip()))
    assert request.namespace == "cluster"
    job = request.job
    given = {name: getattr(job, name) for name in ("user", "group") if job.HasField(name)}
    given |= {name: getattr(job, name) for name in ("user_name", "account", "job_name") if getattr(job, name)}
    assert given == expected
    assert (job.submit, job.t_req, job.procs) == (1795800000, 1800, 2)


#: Runs job_submit.lua on one job_desc as slurmctld would (a `slurm` table, the partitions the user may use),
#: with the client's `predict` replaced by one that prints the PredictRequest it was given (hex, no frame).
SUBMITTED_REQUEST = """
local real_dofile = dofile
dofile = function(path)
    local module = real_dofile(path)
    if path:match("tsched_client.lua$") then
        module.predict = function(config, job)
            print((module.predict_request(config, job):sub(6):gsub(".", function(c)
                return string.format("%02x", c:byte()) end)))
            return nil, "printed"
        end
    end
    return module
end
slurm = { SUCCESS = 0, log_info = function() end, log_error = function(...) print("error", ...) end }
real_dofile(arg[1])
local UNSET32, UNSET16 = 4294967294, 65534
local job_desc = { name = "namd", time_limit = 30, min_cpus = 8, num_tasks = UNSET32, user_id = 1070,
    user_name = "alice", group_id = 1070, account = "Physics", min_nodes = 2, shared = 0,
    min_mem_per_cpu = tonumber(arg[3]), tres_per_node = "gres:gpu:a100:2",
    partition = arg[2] ~= "" and arg[2] or nil, qos = nil, default_qos = "normal" }
local partitions = { cpu = { flag_default = 0, def_mem_per_cpu = 1000 },
    gpu = { flag_default = 1, def_mem_per_node = 16000 } }
slurm_job_submit(job_desc, partitions, 1070)
"""


@pytest.mark.parametrize(
    ("asked", "partition", "memory", "in_all"),
    [
        ("", "gpu", "1500", 8 * 1500),  # --mem-per-cpu=1500 on 8 CPUs
        ("cpu,gpu", "cpu", "1500", 8 * 1500),
        ("", "gpu", "", 2 * 16000),  # no --mem: the partition's DefMemPerNode on 2 nodes
        ("cpu,gpu", "cpu", "", 8 * 1000),  # or its DefMemPerCPU on 8 CPUs
    ],
)
def test_job_submit_asks_with_what_the_job_asks_of_the_cluster(
    asked: str, partition: str, memory: str, in_all: int
) -> None:
    """The partition (the default one when the job names none), QOS, nodes, memory and GPUs in all, and
    exclusivity, as sacct's history records them (Partition, QOS, ReqTRES node=, mem=, gres/gpu=): a job
    that asks for no memory gets its partition's default, as slurmctld gives it."""
    script = REPO / "deploy" / "slurm" / "job_submit.lua"
    done = subprocess.run(
        [str(LUA), "-", str(script), asked, memory],
        input=SUBMITTED_REQUEST,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "error" not in done.stdout, done.stdout + done.stderr
    job = pb.PredictRequest.FromString(bytes.fromhex(done.stdout.strip())).job
    assert (job.user_name, job.account, job.t_req, job.procs, job.job_name) == ("alice", "physics", 1800, 8, "namd")
    assert (job.partition, job.qos_name, job.nodes, job.memory_mb, job.gpus, job.exclusive) == (
        partition,
        "normal",
        2,
        in_all,
        4,
        True,
    )
