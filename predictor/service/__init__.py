"""The gRPC predictor service: estimators behind the `tsched.v1.Predictor` contract.

The domain (no gRPC):
- `core`: the operations (predict, observe, sync, forecast, describe, reset) over the rooms below;
- `namespaces`: each namespace's history, clock, names and estimators, its checks, and the table of them;
- `specs`: SPECs resolved once per spelling, held to the estimator caps (evaluation-only ones never served);
- `recording`: the write-ahead of every event, snapshots, and the replay on start; `state`: the state file
  (events and snapshots in SQLite, one server per file); `records`: jobs as int64 rows; `snapshots`: a
  namespace as one blob, read back through an allow-list; `training`: the model-training threads;
- `views`: what the service tells (estimators, namespaces, status) as frozen dataclasses.

The transport:
- `codec`: protobuf messages <-> job types and views, for server and client;
- `servicer`: the RPCs over the core, refusals mapped to status codes;
- `gate`: the interceptor every call passes (tokens, admission, decoding, namespaces, the watchdog);
  `security` and `limits`: the policy it applies, in plain Python; `quoting`: client input in messages;
- `server`: hosting (TLS, Unix sockets, health, reflection, a stop that always ends);
  `launcher`: the server in a child process;
- `connection`: credentials, the channel, deadlines and errors; `client`: the typed calls;
  `remote`: `RemoteSession`, the simulator's remote predictor.
"""
