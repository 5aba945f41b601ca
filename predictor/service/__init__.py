"""The gRPC predictor service: estimators behind the `tsched.v1.Predictor` contract.

- `core`: namespaces of history and their estimators (the domain; no gRPC);
- `codec`: protobuf messages <-> job types, for server and client;
- `servicer`: the RPCs over the core, refusals mapped to status codes;
- `server`: hosting (health, reflection, graceful stop); `launcher`: the server in a child process;
- `client`: a typed client and `RemoteSession`, the simulator's remote predictor;
- `state`: acknowledged completions in SQLite.
"""
