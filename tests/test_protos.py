"""The committed gRPC code must be what scripts/gen_protos.py makes of the .proto today."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "predictor" / "proto"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_protos", REPO / "scripts" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_code_matches_the_proto(tmp_path: Path) -> None:
    generated = _generator().generate(tmp_path)
    assert generated, "the generator wrote nothing"
    stale = [
        str(path.relative_to(tmp_path))
        for path in generated
        if not (COMMITTED / path.relative_to(tmp_path)).is_file()
        or (COMMITTED / path.relative_to(tmp_path)).read_bytes() != path.read_bytes()
    ]
    assert not stale, f"regenerate with `python scripts/gen_protos.py`; out of date: {', '.join(stale)}"


def test_generated_modules_import_as_a_package() -> None:
    from predictor.proto import pb, rpc

    assert pb.DESCRIPTOR.package == "tsched.v1"
    assert rpc.PredictorStub.__module__ == "predictor.proto.tsched.v1.predictor_pb2_grpc"
    assert set(pb.DESCRIPTOR.services_by_name["Predictor"].methods_by_name) == {
        "Predict",
        "PredictBatch",
        "ObserveCompletions",
        "Sync",
        "SyncStream",
        "ListEstimators",
        "ResetNamespace",
        "ListNamespaces",
        "ForecastStart",
        "Status",
    }
