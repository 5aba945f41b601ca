"""The gRPC contract's Python code (generated from protos/ by scripts/gen_protos.py).

Import the messages and stubs from here: `from predictor.proto import pb, rpc`.
"""

from predictor.proto.tsched.v1 import predictor_pb2 as pb
from predictor.proto.tsched.v1 import predictor_pb2_grpc as rpc

__all__ = ["pb", "rpc"]
