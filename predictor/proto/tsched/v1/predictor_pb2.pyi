from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Job(_message.Message):
    __slots__ = ("job_id", "submit", "user", "group", "t_req", "procs", "queue", "executable", "user_name", "group_name", "account", "nodes", "memory_mb", "gpus", "qos", "exclusive", "partition", "qos_name", "job_name")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    T_REQ_FIELD_NUMBER: _ClassVar[int]
    PROCS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    EXECUTABLE_FIELD_NUMBER: _ClassVar[int]
    USER_NAME_FIELD_NUMBER: _ClassVar[int]
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    QOS_NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    submit: int
    user: int
    group: int
    t_req: int
    procs: int
    queue: int
    executable: int
    user_name: str
    group_name: str
    account: str
    nodes: int
    memory_mb: int
    gpus: int
    qos: int
    exclusive: bool
    partition: str
    qos_name: str
    job_name: str
    def __init__(self, job_id: _Optional[int] = ..., submit: _Optional[int] = ..., user: _Optional[int] = ..., group: _Optional[int] = ..., t_req: _Optional[int] = ..., procs: _Optional[int] = ..., queue: _Optional[int] = ..., executable: _Optional[int] = ..., user_name: _Optional[str] = ..., group_name: _Optional[str] = ..., account: _Optional[str] = ..., nodes: _Optional[int] = ..., memory_mb: _Optional[int] = ..., gpus: _Optional[int] = ..., qos: _Optional[int] = ..., exclusive: _Optional[bool] = ..., partition: _Optional[str] = ..., qos_name: _Optional[str] = ..., job_name: _Optional[str] = ...) -> None: ...

class Completion(_message.Message):
    __slots__ = ("job", "end", "runtime")
    JOB_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    job: Job
    end: int
    runtime: int
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., end: _Optional[int] = ..., runtime: _Optional[int] = ...) -> None: ...

class Prediction(_message.Message):
    __slots__ = ("t_sched", "factor", "basis", "fallback")
    T_SCHED_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    BASIS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    t_sched: int
    factor: float
    basis: int
    fallback: bool
    def __init__(self, t_sched: _Optional[int] = ..., factor: _Optional[float] = ..., basis: _Optional[int] = ..., fallback: _Optional[bool] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("namespace", "estimator", "job")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    estimator: str
    job: Job
    def __init__(self, namespace: _Optional[str] = ..., estimator: _Optional[str] = ..., job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class PredictResponse(_message.Message):
    __slots__ = ("prediction", "estimator", "submit", "namespace", "quantiles", "p_underestimate")
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUANTILES_FIELD_NUMBER: _ClassVar[int]
    P_UNDERESTIMATE_FIELD_NUMBER: _ClassVar[int]
    prediction: Prediction
    estimator: str
    submit: int
    namespace: str
    quantiles: _containers.RepeatedCompositeFieldContainer[Quantile]
    p_underestimate: float
    def __init__(self, prediction: _Optional[_Union[Prediction, _Mapping]] = ..., estimator: _Optional[str] = ..., submit: _Optional[int] = ..., namespace: _Optional[str] = ..., quantiles: _Optional[_Iterable[_Union[Quantile, _Mapping]]] = ..., p_underestimate: _Optional[float] = ...) -> None: ...

class Quantile(_message.Message):
    __slots__ = ("probability", "runtime")
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    probability: float
    runtime: int
    def __init__(self, probability: _Optional[float] = ..., runtime: _Optional[int] = ...) -> None: ...

class PredictBatchRequest(_message.Message):
    __slots__ = ("namespace", "estimator", "jobs")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    estimator: str
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, namespace: _Optional[str] = ..., estimator: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class PredictBatchResponse(_message.Message):
    __slots__ = ("predictions", "estimator")
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    predictions: _containers.RepeatedCompositeFieldContainer[Prediction]
    estimator: str
    def __init__(self, predictions: _Optional[_Iterable[_Union[Prediction, _Mapping]]] = ..., estimator: _Optional[str] = ...) -> None: ...

class ObserveCompletionsRequest(_message.Message):
    __slots__ = ("namespace", "completions")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    completions: _containers.RepeatedCompositeFieldContainer[Completion]
    def __init__(self, namespace: _Optional[str] = ..., completions: _Optional[_Iterable[_Union[Completion, _Mapping]]] = ...) -> None: ...

class ObserveCompletionsResponse(_message.Message):
    __slots__ = ("accepted", "duplicates")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    duplicates: int
    def __init__(self, accepted: _Optional[int] = ..., duplicates: _Optional[int] = ...) -> None: ...

class SyncRequest(_message.Message):
    __slots__ = ("namespace", "estimator", "completions", "submitted")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    estimator: str
    completions: _containers.RepeatedCompositeFieldContainer[Completion]
    submitted: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, namespace: _Optional[str] = ..., estimator: _Optional[str] = ..., completions: _Optional[_Iterable[_Union[Completion, _Mapping]]] = ..., submitted: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class SyncResponse(_message.Message):
    __slots__ = ("predictions", "estimator", "accepted", "duplicates")
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    predictions: _containers.RepeatedCompositeFieldContainer[Prediction]
    estimator: str
    accepted: int
    duplicates: int
    def __init__(self, predictions: _Optional[_Iterable[_Union[Prediction, _Mapping]]] = ..., estimator: _Optional[str] = ..., accepted: _Optional[int] = ..., duplicates: _Optional[int] = ...) -> None: ...

class ListEstimatorsRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class EstimatorParameter(_message.Message):
    __slots__ = ("name", "default")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    default: str
    def __init__(self, name: _Optional[str] = ..., default: _Optional[str] = ...) -> None: ...

class EstimatorInfo(_message.Message):
    __slots__ = ("name", "parameters", "evaluation_only", "allowed", "description", "trained_model")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ONLY_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TRAINED_MODEL_FIELD_NUMBER: _ClassVar[int]
    name: str
    parameters: _containers.RepeatedCompositeFieldContainer[EstimatorParameter]
    evaluation_only: bool
    allowed: bool
    description: str
    trained_model: bool
    def __init__(self, name: _Optional[str] = ..., parameters: _Optional[_Iterable[_Union[EstimatorParameter, _Mapping]]] = ..., evaluation_only: _Optional[bool] = ..., allowed: _Optional[bool] = ..., description: _Optional[str] = ..., trained_model: _Optional[bool] = ...) -> None: ...

class ListEstimatorsResponse(_message.Message):
    __slots__ = ("estimators", "default_specs", "namespace_exists", "namespace_specs", "completions", "clock")
    ESTIMATORS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_SPECS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_EXISTS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_SPECS_FIELD_NUMBER: _ClassVar[int]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    estimators: _containers.RepeatedCompositeFieldContainer[EstimatorInfo]
    default_specs: _containers.RepeatedScalarFieldContainer[str]
    namespace_exists: bool
    namespace_specs: _containers.RepeatedScalarFieldContainer[str]
    completions: int
    clock: int
    def __init__(self, estimators: _Optional[_Iterable[_Union[EstimatorInfo, _Mapping]]] = ..., default_specs: _Optional[_Iterable[str]] = ..., namespace_exists: _Optional[bool] = ..., namespace_specs: _Optional[_Iterable[str]] = ..., completions: _Optional[int] = ..., clock: _Optional[int] = ...) -> None: ...

class ResetNamespaceRequest(_message.Message):
    __slots__ = ("namespace", "missing_ok")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    MISSING_OK_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    missing_ok: bool
    def __init__(self, namespace: _Optional[str] = ..., missing_ok: _Optional[bool] = ...) -> None: ...

class ResetNamespaceResponse(_message.Message):
    __slots__ = ("forgotten",)
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    forgotten: int
    def __init__(self, forgotten: _Optional[int] = ...) -> None: ...

class ListNamespacesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NamespaceInfo(_message.Message):
    __slots__ = ("name", "completions", "clock", "estimators")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    ESTIMATORS_FIELD_NUMBER: _ClassVar[int]
    name: str
    completions: int
    clock: int
    estimators: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., completions: _Optional[int] = ..., clock: _Optional[int] = ..., estimators: _Optional[_Iterable[str]] = ...) -> None: ...

class ListNamespacesResponse(_message.Message):
    __slots__ = ("namespaces",)
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedCompositeFieldContainer[NamespaceInfo]
    def __init__(self, namespaces: _Optional[_Iterable[_Union[NamespaceInfo, _Mapping]]] = ...) -> None: ...

class RunningJob(_message.Message):
    __slots__ = ("job", "start", "node_list")
    JOB_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    NODE_LIST_FIELD_NUMBER: _ClassVar[int]
    job: Job
    start: int
    node_list: str
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., start: _Optional[int] = ..., node_list: _Optional[str] = ...) -> None: ...

class ForecastStartRequest(_message.Message):
    __slots__ = ("namespace", "estimator", "now", "machine_procs", "running", "waiting", "policy", "backfill", "backfill_order", "lower_quantile", "draws")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    MACHINE_PROCS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_ORDER_FIELD_NUMBER: _ClassVar[int]
    LOWER_QUANTILE_FIELD_NUMBER: _ClassVar[int]
    DRAWS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    estimator: str
    now: int
    machine_procs: int
    running: _containers.RepeatedCompositeFieldContainer[RunningJob]
    waiting: _containers.RepeatedCompositeFieldContainer[Job]
    policy: str
    backfill: str
    backfill_order: str
    lower_quantile: float
    draws: int
    def __init__(self, namespace: _Optional[str] = ..., estimator: _Optional[str] = ..., now: _Optional[int] = ..., machine_procs: _Optional[int] = ..., running: _Optional[_Iterable[_Union[RunningJob, _Mapping]]] = ..., waiting: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., policy: _Optional[str] = ..., backfill: _Optional[str] = ..., backfill_order: _Optional[str] = ..., lower_quantile: _Optional[float] = ..., draws: _Optional[int] = ...) -> None: ...

class StartForecast(_message.Message):
    __slots__ = ("job_id", "start", "lower", "upper")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    LOWER_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    start: int
    lower: int
    upper: int
    def __init__(self, job_id: _Optional[int] = ..., start: _Optional[int] = ..., lower: _Optional[int] = ..., upper: _Optional[int] = ...) -> None: ...

class ForecastStartResponse(_message.Message):
    __slots__ = ("forecasts", "estimator", "namespace", "now")
    FORECASTS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    forecasts: _containers.RepeatedCompositeFieldContainer[StartForecast]
    estimator: str
    namespace: str
    now: int
    def __init__(self, forecasts: _Optional[_Iterable[_Union[StartForecast, _Mapping]]] = ..., estimator: _Optional[str] = ..., namespace: _Optional[str] = ..., now: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class EstimatorStatus(_message.Message):
    __slots__ = ("estimator", "scored", "accuracy", "underestimated", "bad_estimates", "fallbacks", "pending", "choice", "retunings", "replay_scores")
    class ReplayScoresEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    SCORED_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    UNDERESTIMATED_FIELD_NUMBER: _ClassVar[int]
    BAD_ESTIMATES_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    RETUNINGS_FIELD_NUMBER: _ClassVar[int]
    REPLAY_SCORES_FIELD_NUMBER: _ClassVar[int]
    estimator: str
    scored: int
    accuracy: float
    underestimated: float
    bad_estimates: float
    fallbacks: float
    pending: int
    choice: str
    retunings: int
    replay_scores: _containers.ScalarMap[str, float]
    def __init__(self, estimator: _Optional[str] = ..., scored: _Optional[int] = ..., accuracy: _Optional[float] = ..., underestimated: _Optional[float] = ..., bad_estimates: _Optional[float] = ..., fallbacks: _Optional[float] = ..., pending: _Optional[int] = ..., choice: _Optional[str] = ..., retunings: _Optional[int] = ..., replay_scores: _Optional[_Mapping[str, float]] = ...) -> None: ...

class CallCount(_message.Message):
    __slots__ = ("rpc", "code", "count")
    RPC_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    rpc: str
    code: str
    count: int
    def __init__(self, rpc: _Optional[str] = ..., code: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("namespace", "namespace_exists", "completions", "clock", "predictions", "fallbacks", "estimators", "namespaces", "training_runs", "calls")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_EXISTS_FIELD_NUMBER: _ClassVar[int]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATORS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    TRAINING_RUNS_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    namespace_exists: bool
    completions: int
    clock: int
    predictions: int
    fallbacks: int
    estimators: _containers.RepeatedCompositeFieldContainer[EstimatorStatus]
    namespaces: int
    training_runs: int
    calls: _containers.RepeatedCompositeFieldContainer[CallCount]
    def __init__(self, namespace: _Optional[str] = ..., namespace_exists: _Optional[bool] = ..., completions: _Optional[int] = ..., clock: _Optional[int] = ..., predictions: _Optional[int] = ..., fallbacks: _Optional[int] = ..., estimators: _Optional[_Iterable[_Union[EstimatorStatus, _Mapping]]] = ..., namespaces: _Optional[int] = ..., training_runs: _Optional[int] = ..., calls: _Optional[_Iterable[_Union[CallCount, _Mapping]]] = ...) -> None: ...
