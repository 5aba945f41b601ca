"""The gRPC predictor service: estimators behind the `tsched.v1.Predictor` contract.

- `core`: namespaces of recorded events and their estimators, and their bounds (the domain; no gRPC);
- `state`: the state file (events and snapshots in SQLite, one server per file); `records`: jobs as
  int64 rows; `snapshots`: a namespace as one blob, read back through an allow-list;
- `codec`: protobuf messages <-> job types, for server and client;
- `servicer`: the RPCs over the core, refusals mapped to status codes;
- `gate`: the interceptor every call passes (tokens, admission, decoding, namespaces, the watchdog);
  `security` and `limits`: the policy it applies, in plain Python; `quoting`: client input in messages;
- `server`: hosting (TLS, Unix sockets, health, reflection, a stop that always ends);
  `launcher`: the server in a child process;
- `client`: a typed client and `RemoteSession`, the simulator's remote predictor, with `Credentials`.
"""
