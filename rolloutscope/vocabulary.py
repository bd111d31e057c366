"""The span vocabulary: every span name, event name and attribute key rolloutscope emits or reads.

Constants only. If two files spell the same key, one of them is wrong: import it from here.

Naming rules (docs/domain/telemetry.md#rolloutscopes-own-conventions):
- released Gym names are reused unchanged (``gym.rollout``, ``nemo.gym.rollout.id``,
  ``nemo.gym.server.name``, ``nemo.run.id``, ``service.name``);
- checkpoint names follow the draft ``gym.checkpoint.*`` spans and ``nemo.gym.checkpoint.*``
  attributes exactly, so native data lines up if that draft lands;
- RL-side spans are ``rl.*`` with ``nemo.rl.*`` attributes;
- state intervals (a shard's stay in one state, a parked rollout, admission closed, a live
  deadline) are spans; instants (a transition, a deadline firing, an ACK) are span events;
- ids go on spans and events, never on metric attributes.

Which span carries which attribute is the contract the store's model views read; each span name
below says what it must carry.
"""

from __future__ import annotations

from enum import StrEnum


class ResourceAttr:
    """Resource attributes every process sets (rule 5 of
    docs/domain/telemetry.md#rolloutscopes-own-conventions)."""

    SERVICE_NAME = "service.name"
    SERVICE_INSTANCE_ID = "service.instance.id"
    RUN_ID = "nemo.run.id"
    GYM_SERVER_NAME = "nemo.gym.server.name"
    GYM_SERVER_TYPE = "nemo.gym.server.type"
    RL_COMPONENT = "nemo.rl.component"
    RANK = "nv.dl.rank"
    WORLD_SIZE = "nv.dl.world_size"
    # what a released Gym process also sets (nemo-lens): its version and group, and OTel's
    # process identity. service.instance.id is NOT a process id there: Gym builds it as
    # "<run id>-rank<rank>" and every Gym process is rank 0, so process.pid tells them apart.
    GYM_VERSION = "nemo.gym.version"
    GYM_SERVICE_GROUP = "nemo.gym.service_group"
    PROCESS_PID = "process.pid"
    HOST_NAME = "host.name"
    SERVICE_VERSION = "service.version"
    SDK_LANGUAGE = "telemetry.sdk.language"
    SDK_NAME = "telemetry.sdk.name"
    SDK_VERSION = "telemetry.sdk.version"
    # NeMo-RL's own telemetry (nemo_rl/telemetry, RL #3655): the algorithm a process trains,
    # its model, and the Ray worker group a worker process belongs to
    RL_ALGORITHM = "rl.algorithm"
    RL_MODEL = "rl.model"
    RL_WORKER_GROUP = "rl.worker_group"


class Attr:
    """Span and event attribute keys."""

    # Join keys (docs/domain/README.md#identities). RUN_ID may also be set per span (a replay
    # writes several runs through one process).
    RUN_ID = ResourceAttr.RUN_ID
    ROLLOUT_ID = "nemo.gym.rollout.id"
    EPISODE_ROLLOUT_ID = "nemo.gym.episode.rollout_id"
    EPISODE_ATTEMPT = "nemo.gym.episode.attempt"
    CHECKPOINT_ID = "nemo.gym.checkpoint.id"
    PROMPT_IDX = "nemo.rl.prompt.idx"
    GROUP_ID = "nemo.rl.group.id"
    ROW_IDX = "nemo.rl.row.idx"
    TARGET_STEP = "nemo.rl.target_step"
    WEIGHT_VERSION = "nemo.rl.weight_version"
    SHARD_IDX = "nemo.rl.gen.shard.idx"
    BACKEND_URL = "nemo.rl.gen.backend.url"
    MODEL_CALL_ID = "nemo.gym.model_call.id"
    TICKET_ID = "nemo.gym.model.ticket.id"
    EXECUTION_GENERATION = "nemo.gym.agent.execution.generation"
    # The RL try of a prompt group (0-based; each generate_and_push iteration), stamped on the
    # RL attempt span and on every Gym span that attempt dispatched. Distinct from the Gym
    # attempt that a checkpoint restore bumps (EPISODE_ATTEMPT).
    RL_ATTEMPT = "nemo.rl.rollout.attempt"

    # Checkpoint (docs/domain/checkpoint-protocol.md)
    CK_PARTICIPANT_KIND = "nemo.gym.checkpoint.participant_kind"
    CK_INSTANCE = "nemo.gym.checkpoint.instance"
    CK_OPERATION = "nemo.gym.checkpoint.operation"
    CK_PHASE = "nemo.gym.checkpoint.phase"
    CK_PHASE_FROM = "nemo.gym.checkpoint.phase.from"
    CK_PHASE_TO = "nemo.gym.checkpoint.phase.to"
    CK_OUTCOME = "nemo.gym.checkpoint.outcome"
    CK_CODE = "nemo.gym.checkpoint.code"
    CK_BLOCKERS = "nemo.gym.checkpoint.blockers"
    CK_BLOCKER_COUNT = "nemo.gym.checkpoint.blocker_count"
    CK_BLOCKER_KEYS = "nemo.gym.checkpoint.blocker_keys"  # capture keys, at most 100
    CK_RECORDS = "nemo.gym.checkpoint.records"
    CK_BYTES = "nemo.gym.checkpoint.bytes"
    CK_EPISODES = "nemo.gym.checkpoint.episodes"
    CK_ROLLOUTS = "nemo.gym.checkpoint.rollouts"
    CK_PARTICIPANTS = "nemo.gym.checkpoint.participants"
    CK_PREPARED = "nemo.gym.checkpoint.prepared"
    CK_STOPPED_AT = "nemo.gym.checkpoint.stopped_at"
    CK_DEADLINE_TS = "nemo.gym.checkpoint.deadline_ts"
    CK_LEASE_EXPIRES_AT = "nemo.gym.checkpoint.lease_expires_at"
    CK_EPISODE = "nemo.gym.checkpoint.episode"
    CK_READY = "nemo.gym.checkpoint.ready"  # report.ready / ready_to_commit of a reply
    CK_DETAIL = "nemo.gym.checkpoint.detail"  # the error body's detail text, on refusals
    CK_WORKERS_EXPECTED = "nemo.gym.checkpoint.workers.expected"
    CK_WORKERS_ACKED = "nemo.gym.checkpoint.workers.acknowledged"
    CK_COUNT_INFLIGHT = "nemo.gym.checkpoint.count.inflight"
    CK_COUNT_HELD = "nemo.gym.checkpoint.count.held"
    CK_COUNT_CUT = "nemo.gym.checkpoint.count.cut"
    CK_COUNT_CUT_FAILED = "nemo.gym.checkpoint.count.cut_failed"
    CK_COUNT_CUT_SKIPPED = "nemo.gym.checkpoint.count.cut_skipped"
    CK_COUNT_RUNNING = "nemo.gym.checkpoint.count.running"
    CK_COUNT_PARKED_WITH_BOUNDARY = "nemo.gym.checkpoint.count.parked_with_boundary"
    CK_COUNT_PARKED_WITHOUT_BOUNDARY = "nemo.gym.checkpoint.count.parked_without_boundary"
    CK_COUNT_COMPLETED_UNACKED = "nemo.gym.checkpoint.count.completed_unacknowledged"
    SNAPSHOT_INDEX = "nemo.rl.snapshot.index"
    SNAPSHOT_OUTCOME = "nemo.rl.snapshot.outcome"
    FENCE_OWNER = "nemo.rl.fence.owner"

    # Generation fleet (docs/domain/fleet-health.md)
    FLEET_STATE = "nemo.rl.gen_fleet.state"
    FLEET_PREVIOUS_STATE = "nemo.rl.gen_fleet.previous_state"
    FLEET_TRIGGER = "nemo.rl.gen_fleet.trigger"
    FLEET_MEMBERSHIP_EPOCH = "nemo.rl.gen_fleet.membership_epoch"
    FLEET_WEIGHT_VERSION = "nemo.rl.gen_fleet.weight_version"
    FLEET_PROBE_FAILURES = "nemo.rl.gen_fleet.probe_failures"
    FLEET_REPORTED_FAILURES = "nemo.rl.gen_fleet.reported_failures"
    FLEET_RESTART_ATTEMPTS = "nemo.rl.gen_fleet.restart_attempts"
    FLEET_LAST_ERROR = "nemo.rl.gen_fleet.last_error"
    FLEET_OPERATION = "nemo.rl.gen_fleet.operation"  # the fleet-health method an adapter saw
    FLEET_SERVING_SHARDS = "nemo.rl.gen_fleet.serving_shards"
    FLEET_MIN_HEALTHY_SHARDS = "nemo.rl.gen_fleet.min_healthy_shards"
    PROBE_OK = "nemo.rl.probe.ok"
    PROBE_DURATION_MS = "nemo.rl.probe.duration_ms"
    PROBE_ERROR = "nemo.rl.probe.error"
    ROUTER_SERVING_BACKENDS = "nemo.rl.router.serving_backends"
    ROUTER_SERVING_COUNT = "nemo.rl.router.serving_backends.count"
    ROUTER_OUTCOME = "nemo.rl.router.outcome"
    ROUTER_REFLEX_DROP = "nemo.rl.router.reflex_drop"
    ROUTER_FAILURE_COUNT = "nemo.rl.router.failure_count"
    HTTP_STATUS = "http.response.status_code"
    EXCEPTION_MESSAGE = "exception.message"
    EXCEPTION_TYPE = "exception.type"
    HTTP_METHOD = "http.request.method"
    HTTP_ROUTE = "http.route"
    URL_FULL = "url.full"
    URL_PATH = "url.path"
    SERVER_ADDRESS = "server.address"
    SERVER_PORT = "server.port"
    ERROR_TYPE = "error.type"
    # the older HTTP semantic conventions, which the FastAPI / ASGI instrumentation Gym 0.7.0
    # installs still writes on SERVER spans (http.status_code, not http.response.status_code)
    HTTP_STATUS_OLD = "http.status_code"
    HTTP_METHOD_OLD = "http.method"
    HTTP_URL_OLD = "http.url"
    HTTP_TARGET_OLD = "http.target"
    HTTP_HOST_OLD = "http.host"
    NET_HOST_PORT_OLD = "net.host.port"
    # OTel's generative-AI conventions, where a client or engine records them
    GEN_AI_SYSTEM = "gen_ai.system"
    GEN_AI_OPERATION = "gen_ai.operation.name"
    GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
    GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"

    # Rollouts (docs/domain/rollouts-and-deadlines.md)
    ROLLOUT_OUTCOME = "nemo.rl.rollout.outcome"
    ROLLOUT_INFRA_ATTEMPTS = "nemo.rl.rollout.infra_attempts"
    ROLLOUT_DATA_ATTEMPTS = "nemo.rl.rollout.data_attempts"
    FAILURE_CLASS = "nemo.rl.failure.class"
    FAILURE_REASON = "nemo.rl.failure.reason"
    FAILURE_HTTP_STATUS = "nemo.rl.failure.http_status"
    FAILURE_DETAIL = "nemo.rl.failure.detail"
    BACKOFF_S = "nemo.rl.backoff_s"
    ROW_ATTEMPT = "nemo.rl.row.attempt"
    ROWS_PENDING = "nemo.rl.rows.pending"
    ROWS_RECEIVED = "nemo.rl.rows.received"
    ROWS_MISSING = "nemo.rl.rows.missing"
    TOKENS_IN = "gen_ai.usage.input_tokens"
    TOKENS_OUT = "gen_ai.usage.output_tokens"
    STALL_IDLE_S = "nemo.rl.stall.idle_s"
    STALL_INFLIGHT = "nemo.rl.stall.inflight"
    STALL_COMMITTED = "nemo.rl.stall.committed"
    STALL_TRAIN_STEPS = "nemo.rl.stall.train_steps"
    STALL_MAX_STEPS = "nemo.rl.stall.max_steps"
    STALL_TIMEOUT_S = "nemo.rl.stall.stall_timeout_s"
    STALL_ACTION = "nemo.rl.stall.action"
    TRAINER_VERSION = "nemo.rl.trainer_version"
    TRAIN_STEP = "nemo.rl.train.step"
    ABORTED_STALE_INFLIGHT = "nemo.rl.aborted_stale_inflight_groups"
    ENV_NAME = "nemo.rl.env.name"
    ENV_PROBLEM = "nemo.rl.env.problem"
    TRAIN_MAX_STEPS = "nemo.rl.train.max_steps"
    TRAIN_LAG = "nemo.rl.train.lag"  # trainer version minus the oldest weights still in use
    ROWS_TOTAL = "nemo.rl.rows.total"  # rows of the prompt group a re-dispatch belongs to
    ROW_MAX_ATTEMPTS = "nemo.rl.row.max_attempts"
    CONSECUTIVE_DROPS = "nemo.rl.rollout.consecutive_drops"
    MAX_CONSECUTIVE_DROPS = "nemo.rl.rollout.max_consecutive_drops"
    EPOCHS = "nemo.rl.epochs"
    ROUTER_IGNORED_COUNT = "nemo.rl.router.ignored_urls.count"

    # Deadlines (docs/domain/rollouts-and-deadlines.md#deadlines)
    DEADLINE_ID = "nemo.rl.deadline.id"
    DEADLINE_KIND = "nemo.rl.deadline.kind"
    DEADLINE_BUDGET_S = "nemo.rl.deadline.budget_s"
    DEADLINE_DESCRIPTION = "nemo.rl.deadline.description"
    DEADLINE_STARTED_AT = "nemo.rl.deadline.started_at"
    DEADLINE_OUTCOME = "nemo.rl.deadline.outcome"
    DEADLINE_ACTIVE_S = "nemo.rl.deadline.active_s"
    DEADLINE_SUSPENDED_S = "nemo.rl.deadline.suspended_s"
    DEADLINE_REMAINING_S = "nemo.rl.deadline.remaining_s"
    DEADLINE_HOLDER = "nemo.rl.deadline.holder"
    DEADLINE_HOLDERS_COUNT = "nemo.rl.deadline.holders_count"
    DEADLINE_STATE_WHEN_FIRED = "nemo.rl.deadline.state_when_fired"

    # Parking, held responses, cuts, ACK
    # (docs/domain/checkpoint-protocol.md#admission-parking-and-held-responses)
    EXECUTION_STATE = "nemo.gym.agent.execution.state"
    BOUNDARY_INDEX = "nemo.gym.agent.boundary.index"
    PARKED_BOUNDARY_STATE = "nemo.gym.agent.parked_boundary_state"
    RETIRE_REASON = "nemo.gym.agent.retire.reason"
    RESULT_ID = "nemo.gym.agent.result_id"
    RESULT_DIGEST = "nemo.gym.agent.result_digest"
    CUT_DISPOSITION = "nemo.gym.cut.disposition"
    CUT_PREFIX_TOKENS = "nemo.gym.cut.prefix_token_count"
    CUT_OUTCOME = "nemo.gym.cut.outcome"
    CUT_SKIP_REASON = "nemo.gym.cut.skip_reason"
    ACK_RECEIPTS = "nemo.rl.ack.receipts"
    ACK_OUTCOME = "nemo.rl.ack.outcome"

    # Released Gym spans (nemo_gym/telemetry): the server a span was made in; later Gym
    # versions add the rollout's task and repeat index (decoded from the rollout id), the
    # model's own response id, a tool call's name and a rollout's outcome.
    GYM_SERVER_NAME = ResourceAttr.GYM_SERVER_NAME
    GYM_TASK_ID = "nemo.gym.task.id"
    GYM_REPEAT_INDEX = "nemo.gym.repeat.index"
    GYM_MODEL_REQUEST_ID = "nemo.gym.model_request.id"
    GYM_TOOL_NAME = "nemo.gym.tool.name"
    GYM_ROLLOUT_OUTCOME = "nemo.gym.rollout.outcome"
    # nemo-lens's reward constant: Gym 0.7.0 never sets it (reward is experiment telemetry
    # there), a caller may
    REWARD = "rl.reward"

    # Gym client retries of one model call (docs/domain/rollouts-and-deadlines.md#gyms-own-retries)
    RETRY_TRY = "nemo.gym.retry.try"
    RETRY_MAX_TRIES = "nemo.gym.retry.max_tries"
    RETRY_KIND = "nemo.gym.retry.kind"  # rate_limit | server_error | http_error

    # The RL Logger's step on a metric data point sent over OTLP (docs/domain/telemetry.md#nemo-rl);
    # NeMo-RL's own telemetry also stamps it on rl.<algorithm>.save_checkpoint
    METRIC_STEP = "rl.step"

    # NeMo-RL's own telemetry (nemo_rl/telemetry, RL #3655 and #4052; docs/train-steps.md):
    # rl.<algorithm>.step carries the iteration (and epoch; rl.sc.step its weight version); a
    # leaf phase its goodput bucket; an rl.idle.* wait its Timer category; an async rollout
    # batch the weights it generated from, the trainer version it targets and its width; a
    # single-controller dispatch (rl.sc.generate_and_push) its try (SpanName.RL_ATTEMPT's
    # spelling, as an attribute).
    TELEMETRY_ITERATION = "rl.iteration"
    TELEMETRY_EPOCH = "rl.epoch"
    TELEMETRY_BUCKET = "rl.bucket"  # productive | overhead | idle | wasted; none on umbrellas
    TELEMETRY_EFFICIENCY_CATEGORY = "rl.efficiency.category"  # idle/buffer_starvation, ...
    TELEMETRY_WEIGHT_VERSION = "rl.weight_version"
    TELEMETRY_TARGET_WEIGHT_VERSION = "rl.target_weight_version"
    TELEMETRY_NUM_PROMPT_GROUPS = "rl.num_prompt_groups"
    TELEMETRY_NUM_GENERATIONS_PER_PROMPT = "rl.num_generations_per_prompt"
    TELEMETRY_ROLLOUT_ATTEMPT = "rl.rollout.attempt"

    # Faults a replay injected (what a live run cannot know: the ground truth of a fault)
    FAULT_KIND = "rolloutscope.fault.kind"
    FAULT_DETAIL = "rolloutscope.fault.detail"

    # Imported logs: the raw line, where it came from, and the free text after what its event
    # parses (OTel's log.* names where they exist).
    LOG_ORIGINAL = "log.record.original"
    LOG_FILE_NAME = "log.file.name"
    LOG_LINE_NUMBER = "rolloutscope.import.line"
    LOG_KIND = "rolloutscope.import.line_kind"  # which line grammar matched, or "unknown"
    LOG_DETAIL = "nemo.rl.log.detail"

    # Open-interval start markers (see SpanName.OPEN_MARKER_SUFFIX below).
    OPEN_MARKER_FOR = "rolloutscope.open_marker_for"
    OPEN_MARKER_PARENT = "rolloutscope.open_marker_parent"
    # Replay provenance (set on every span a replay emits).
    REPLAY_SCENARIO = "rolloutscope.replay.scenario"


class SpanName:
    """Span names. Each docstring line names the attributes the model views read."""

    # -- released Gym spans (nemo-lens), kept unchanged
    GYM_ROLLOUT = "gym.rollout"  # ROLLOUT_ID; one agent /run
    GYM_AGENT_RESPONSES = "gym.agent.responses"
    GYM_MODEL_CHAT = "gym.model.chat_completions"
    GYM_MODEL_RESPONSES = "gym.model.responses"  # a policy model call: ROLLOUT_ID, TOKENS_*
    GYM_MODEL_MESSAGES = "gym.model.messages"
    GYM_VERIFY = "gym.verify"
    GYM_JOB = "gym.job"  # one `gym eval run` (span group job)
    GYM_TOOL_CALL = "gym.tool_call"  # later Gym: one tool route call, GYM_TOOL_NAME

    # -- checkpoint participants: gym.checkpoint.<op>, CHECKPOINT_ID, CK_PARTICIPANT_KIND,
    #    CK_INSTANCE, CK_OUTCOME, CK_CODE, CK_BLOCKERS (a count, as in the draft), CK_BLOCKER_KEYS
    CK_PREPARE = "gym.checkpoint.prepare"
    CK_COMMIT = "gym.checkpoint.commit"
    CK_RESTORE = "gym.checkpoint.restore"
    CK_RESUME = "gym.checkpoint.resume"
    CK_RETIRE = "gym.checkpoint.retire"
    CK_FORGET = "gym.checkpoint.forget"
    CK_RENEW = "gym.checkpoint.renew"
    CK_WAIT_READY = "gym.checkpoint.wait_ready"
    CK_EXPORT = "gym.checkpoint.export"
    CK_WRITE = "gym.checkpoint.write"
    CK_READ = "gym.checkpoint.read"
    CK_INSTALL = "gym.checkpoint.install"
    # a participant's GET /status (or the first generation's status long-poll), observed by
    # the Gym middleware: the reply's CK_PHASE, CK_READY, blockers and report counters
    CK_STATUS = "gym.checkpoint.status"
    # first generation: agent acknowledge-completed; one gym.agent.acknowledged event per receipt
    CK_ACKNOWLEDGE = "gym.checkpoint.acknowledge"
    # a data-plane request (/ng-rollout/{id}/...) a participant refused with a protocol code:
    # ROLLOUT_ID, EPISODE_*, HTTP_ROUTE, HTTP_STATUS; carries the gym.checkpoint.refused event
    CK_REFUSED_REQUEST = "gym.checkpoint.refused_request"
    # admission closed -> reopened, per participant: CHECKPOINT_ID, CK_PARTICIPANT_KIND
    CK_OPEN = "gym.checkpoint.open"
    # controller: gym.checkpoint.coordinate.<op>, and .prepare.<kind> stage children (the
    # draft stamps the checkpoint id on the operation only; its children inherit it)
    CK_COORDINATE_PREFIX = "gym.checkpoint.coordinate."
    CK_COORDINATE_STAGE_PREFIX = "gym.checkpoint.coordinate.prepare."
    CK_COORDINATE_PREPARE = "gym.checkpoint.coordinate.prepare"
    CK_COORDINATE_COMMIT = "gym.checkpoint.coordinate.commit"
    CK_COORDINATE_RESTORE = "gym.checkpoint.coordinate.restore"
    CK_COORDINATE_RESUME = "gym.checkpoint.coordinate.resume"
    CK_COORDINATE_RETIRE = "gym.checkpoint.coordinate.retire"
    CK_COORDINATE_FORGET = "gym.checkpoint.coordinate.forget"
    CK_COORDINATE_RENEW = "gym.checkpoint.coordinate.renew"
    # RL snapshot transaction: CHECKPOINT_ID, SNAPSHOT_INDEX, SNAPSHOT_OUTCOME
    RL_SNAPSHOT = "rl.rollout_snapshot"
    RL_SNAPSHOT_FLUSH_ACKS = "rl.rollout_snapshot.flush_acks"
    RL_SNAPSHOT_FENCE = "rl.rollout_snapshot.generation_fence"
    RL_SNAPSHOT_PREPARE = "rl.rollout_snapshot.gym_prepare"
    RL_SNAPSHOT_COMMIT = "rl.rollout_snapshot.gym_commit"
    RL_SNAPSHOT_VALIDATE = "rl.rollout_snapshot.validate"
    RL_SNAPSHOT_PUBLISH = "rl.rollout_snapshot.publish"
    RL_SNAPSHOT_RELEASE = "rl.rollout_snapshot.gym_release"
    # RL admission fence interval: FENCE_OWNER, CHECKPOINT_ID when owner is gym_checkpoint
    RL_ADMISSION_FENCE = "rl.admission.fence"

    # -- generation fleet
    # one (shard, state) stay: SHARD_IDX, FLEET_STATE, FLEET_PREVIOUS_STATE, FLEET_TRIGGER,
    # FLEET_MEMBERSHIP_EPOCH, streak counters, FLEET_LAST_ERROR
    SHARD_STATE = "rl.gen_fleet.shard_state"
    # router request (SERVER kind): BACKEND_URL, SHARD_IDX, HTTP_STATUS, ROUTER_OUTCOME
    ROUTER_REQUEST = "rl.router.request"
    # a probe tick of the fleet probe pump (events per shard under it)
    FLEET_PROBE_TICK = "rl.gen_fleet.probe_tick"
    # one fleet-health call an adapter recorded outside a probe tick (zero-length): SHARD_IDX,
    # FLEET_OPERATION; carries that call's probe / reported-failure / transition events
    FLEET_CALL = "rl.gen_fleet.call"

    # -- rollouts
    # one generate_and_push: PROMPT_IDX, ROLLOUT_ID, ROLLOUT_OUTCOME, infra/data attempts
    RL_PROMPT = "rl.rollout.prompt"
    # one RL try: PROMPT_IDX, ROLLOUT_ID, RL_ATTEMPT, GROUP_ID, ROLLOUT_OUTCOME, FAILURE_*
    RL_ATTEMPT = "rl.rollout.attempt"
    # one row dispatch: ROW_ATTEMPT, rows pending/received/missing
    RL_GYM_ROWS = "rl.rollout.gym_rows"
    RL_DEADLINE = "rl.deadline"  # DEADLINE_* attributes
    RL_WEIGHT_SYNC = "rl.weight_sync"  # TRAINER_VERSION
    RL_TRAIN_STEP = "rl.train_step"  # TRAIN_STEP
    RL_GYM_ACK = "rl.gym.ack"  # ACK_RECEIPTS, ACK_OUTCOME
    RL_STALL_WATCHDOG_TICK = "rl.stall_watchdog.tick"
    # an instant standing for one imported controller log line whose live span cannot be known
    # from the log (a row re-dispatch names no prompt); it carries that line's event
    LOG_LINE = "rolloutscope.log_line"
    # a fault a replay injected, as a zero-length span at its instant: FAULT_KIND, FAULT_DETAIL,
    # SHARD_IDX / PROMPT_IDX / CHECKPOINT_ID of what it hit
    FAULT = "rolloutscope.fault"

    # -- agent executions, parking, model gate
    # one /run execution: ROLLOUT_ID, RL_ATTEMPT, EPISODE_ATTEMPT, EXECUTION_GENERATION,
    # final EXECUTION_STATE
    AGENT_EXECUTION = "gym.agent.execution"
    # parked by a snapshot: ROLLOUT_ID, RL_ATTEMPT, CHECKPOINT_ID, PARKED_BOUNDARY_STATE
    AGENT_PARKED = "gym.agent.parked"
    # derived completion -> ACK interval
    AGENT_COMPLETED_UNACKED = "gym.agent.completed_unacknowledged"
    MODEL_RESPONSE_HELD = "gym.model.response_held"

    # -- NeMo-RL's own telemetry (nemo_rl/telemetry; docs/train-steps.md). Its step and phase
    #    spans are rl.<algorithm>.<phase> for any algorithm (rl.grpo.step, rl.sc.step, ...), so
    #    train_steps matches them by pattern; these are the names it spells out.
    TELEMETRY_STEP_SUFFIX = ".step"  # rl.<algorithm>.step: TELEMETRY_ITERATION, _EPOCH
    SC_STEP = "rl.sc.step"  # the single controller's step (RL #4052): TELEMETRY_WEIGHT_VERSION
    SC_GENERATE_AND_PUSH = "rl.sc.generate_and_push"  # one dispatch: TELEMETRY_ROLLOUT_ATTEMPT
    # driver-side waits, children of the step, bucket idle: TELEMETRY_EFFICIENCY_CATEGORY
    IDLE_BUFFER_STARVATION = "rl.idle.buffer_starvation"
    IDLE_REFIT_BUBBLE = "rl.idle.refit_bubble"
    # the async collector's loop waits (no bucket: its clock runs beside the driver's)
    IDLE_REFIT_EVENT_WAIT = "rl.idle.refit_event_wait"
    IDLE_GENERATION_LIMIT_PAUSE = "rl.idle.generation_limit_pause"
    VLLM_GENERATE = "rl.vllm.generate"  # driver-side generation (the sync path), productive
    VLLM_GENERATE_TEXT = "rl.vllm.generate_text"


class MetricName:
    """Metric names the views read: released Gym's (``nemo_gym/telemetry/metrics.py``) and
    OTel's HTTP server instruments."""

    GYM_ROLLOUT_DURATION_MS = "gym.rollout.duration_ms"
    GYM_VERIFY_DURATION_MS = "gym.verify.duration_ms"
    GYM_VERIFY_SUCCESS_RATE = "gym.verify.success_rate"  # verify calls that did not raise
    GYM_SERVERS_ACTIVE = "gym.servers.active"
    GYM_CONNECT_TOTAL = "gym.http.connection_pool.connect_total"
    HTTP_SERVER_DURATION = "http.server.duration"  # ms, old conventions
    HTTP_SERVER_REQUEST_DURATION = "http.server.request.duration"  # s, new conventions
    # NeMo-RL's own telemetry: seconds and share of a step per rl.bucket / efficiency category
    RL_EFFICIENCY_SECONDS = "rl.efficiency.seconds"
    RL_EFFICIENCY_PCT = "rl.efficiency.pct"


class GymServerType(StrEnum):
    """``nemo.gym.server.type`` of a released Gym process."""

    ORCHESTRATOR = "orchestrator"
    RESOURCES = "resources_servers"
    AGENT = "responses_api_agents"
    MODEL = "responses_api_models"
    ENVIRONMENT = "environment_servers"


class Dialect(StrEnum):
    """Whose vocabulary a model-view row was read from."""

    RL = "rl"  # rolloutscope's RL-side spans (rl.*), from its wrappers, importers and replays
    GYM = "gym"  # released Gym's own spans (gym.rollout, gym.model.*, HTTP client spans)
    # NeMo-RL's own telemetry (nemo_rl/telemetry: rl.<algorithm>.step and its phases)
    RL_TELEMETRY = "rl_telemetry"


class EventName:
    """Span event names (instants)."""

    CK_ADMISSION_CLOSED = "gym.checkpoint.admission.closed"
    CK_ADMISSION_OPENED = "gym.checkpoint.admission.opened"
    CK_PHASE_CHANGED = "gym.checkpoint.phase.changed"
    CK_LEASE_RENEWED = "gym.checkpoint.lease.renewed"
    CK_LEASE_EXPIRED = "gym.checkpoint.lease.expired"
    CK_PREPARE_NOT_READY = "gym.checkpoint.prepare.not_ready"
    CK_REFUSED = "gym.checkpoint.refused"
    CK_WRITE_STOPPED = "gym.checkpoint.write.stopped"
    CK_WORKER_LOST = "gym.checkpoint.worker_lost"

    FLEET_TRANSITION = "rl.gen_fleet.transition"
    FLEET_PROBE = "rl.gen_fleet.probe"
    FLEET_REPORTED_FAILURE = "rl.gen_fleet.reported_failure"
    FLEET_EXHAUSTED = "rl.gen_fleet.exhausted"
    ROUTER_MEMBERSHIP_PUSH = "rl.router.membership_push"
    ROUTER_FAILURES_DRAINED = "rl.router.failures_drained"
    # a Gym client retry of one model call: HTTP_STATUS, RETRY_TRY, RETRY_MAX_TRIES, RETRY_KIND
    ROUTER_RETRY = "gym.model.retry"
    # Gym's transport loop on a refused or dropped connection (uncapped, every 0.5 s), printed
    # once per 100 errors: ERROR_TYPE, RETRY_TRY (the error count)
    GYM_REQUEST_RETRY = "gym.request.retry"
    ROUTER_RESTARTED = "rl.router.restarted"  # the router actor came back with every backend

    ROW_RECEIVED = "rl.rollout.row_received"
    ROW_REDISPATCH = "rl.rollout.row_redispatch"
    PROMPT_DROPPED = "rl.rollout.prompt_dropped"
    PROMPT_SKIPPED = "rl.rollout.prompt_skipped"
    STALL = "rl.stall"
    ENV_HEALTH_PROBLEM = "rl.env_health.problem"
    PROMPT_SUBSTITUTED = "rl.rollout.prompt_substituted"  # TARGET_STEP, LOG_DETAIL
    GROUP_CLEANUP_FAILED = "rl.rollout.group_cleanup_failed"  # GROUP_ID, EXCEPTION_MESSAGE
    ROLLOUT_PUMP_STARTED = "rl.rollout_pump.started"
    ROLLOUT_PUMP_COMPLETED = "rl.rollout_pump.completed"  # EPOCHS
    WEIGHT_SYNC_ABORTED_STALE = "rl.weight_sync.aborted_stale_inflight"  # ABORTED_STALE_INFLIGHT
    ROUTER_LISTENING = "rl.router.listening"  # URL_FULL
    ROUTER_IGNORED_PUSH = "rl.router.ignored_push"  # ROUTER_IGNORED_COUNT, LOG_DETAIL
    ROUTER_UPDATE_FAILED = "rl.router.update_failed"  # a probe tick's push/drain failed
    ROUTER_METRICS_UNAVAILABLE = "rl.router.metrics_unavailable"  # the watchdog's fetch failed
    GYM_ACK_RETRY = "rl.gym.ack_retry"  # completed-result ACKs retried before a prepare

    DEADLINE_START = "rl.deadline.start"
    DEADLINE_SUSPEND = "rl.deadline.suspend"
    DEADLINE_RESUME = "rl.deadline.resume"
    DEADLINE_FIRE = "rl.deadline.fire"
    DEADLINE_CANCEL = "rl.deadline.cancel"

    AGENT_PARK_REQUESTED = "gym.agent.park_requested"
    AGENT_BOUNDARY_COMMITTED = "gym.agent.boundary_committed"
    AGENT_RELEASED = "gym.agent.released"
    AGENT_RETIRED = "gym.agent.retired"
    AGENT_COMPLETED = "gym.agent.completed"
    AGENT_ACKNOWLEDGED = "gym.agent.acknowledged"
    MODEL_ADMISSION_WAIT = "gym.model.admission_wait"
    MODEL_RESPONSE_STARTED = "gym.model.response_started"
    MODEL_GENERATION_CUT = "gym.model.generation_cut"

    EXCEPTION = "exception"  # OTel's own


class ParticipantKind(StrEnum):
    ENVIRONMENT = "environment"
    MODEL = "model"
    AGENT = "agent"
    RESOURCES = "resources"
    CONTROLLER = "controller"


class CheckpointOp(StrEnum):
    PREPARE = "prepare"
    COMMIT = "commit"
    RESTORE = "restore"
    RESUME = "resume"
    RETIRE = "retire"
    FORGET = "forget"
    RENEW = "renew"


class CheckpointPhase(StrEnum):
    IDLE = "idle"
    PREPARING = "preparing"
    PREPARED = "prepared"
    COMMITTED = "committed"
    RESTORED = "restored"


class OpOutcome(StrEnum):
    OK = "ok"
    ERROR = "error"


class WindowOutcome(StrEnum):
    COMMITTED = "committed"
    ABORTED = "aborted"
    FAILED = "failed"
    OPEN = "open"


class SnapshotOutcome(StrEnum):
    PUBLISHED = "published"
    ABORTED = "aborted"
    FAILED = "failed"
    RELEASE_PENDING = "release_pending"


class FenceOwner(StrEnum):
    WEIGHT_SYNC = "weight_sync"
    GYM_CHECKPOINT = "gym_checkpoint"


class ErrorCode(StrEnum):
    """Checkpoint protocol error codes, both generations
    (docs/domain/checkpoint-protocol.md#error-codes)."""

    CHECKPOINT_ERROR = "checkpoint_error"
    STALE_CHECKPOINT = "stale_checkpoint"
    CHECKPOINT_CONFLICT = "checkpoint_conflict"
    INVALID_PHASE = "invalid_phase"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    STALE_ATTEMPT = "stale_attempt"
    ADMISSION_CLOSED = "admission_closed"
    CHECKPOINT_PARKED = "checkpoint_parked"
    EXPORT_FAILED = "export_failed"
    AGENT_PREPARE_INCOMPLETE = "agent_prepare_incomplete"
    INVALID_ROLLOUT_ID = "invalid_rollout_id"
    LEASE_EXPIRED = "lease_expired"
    RESTART_IN_SCOPE = "restart_in_scope"
    ROLLOUT_ID_REQUIRED = "rollout_id_required"
    UNAUTHORIZED = "unauthorized"
    INVALID_CHECKPOINT_STATE = "invalid_checkpoint_state"
    # first protocol generation (docs/domain/checkpoint-protocol.md#the-first-generation)
    AGENT_CHECKPOINT_ERROR = "agent_checkpoint_error"
    AGENT_ADMISSION_CLOSED = "agent_admission_closed"
    DUPLICATE_EXECUTION = "duplicate_execution"
    NOT_A_POLICY_INSTANCE = "not_a_policy_instance"


class ShardState(StrEnum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    DEAD = "dead"
    RESTARTING = "restarting"
    STALE = "stale"
    RETIRED = "retired"


SERVING_STATES = frozenset({ShardState.HEALTHY, ShardState.SUSPECT})


class ShardTrigger(StrEnum):
    PROBE_FAILURE = "probe_failure"
    REPORTED_FAILURE = "reported_failure"
    PROBE_SUCCESS = "probe_success"
    REFIT = "refit"
    RESTART = "restart"
    LOADED = "loaded"
    RETIRE = "retire"
    INITIAL = "initial"


class RouterOutcome(StrEnum):
    OK = "ok"
    BACKEND_ERROR = "backend_error"
    NO_BACKEND = "no_backend"


class DeadlineKind(StrEnum):
    ROLLOUT = "rollout"
    GENERATION = "generation"
    ENV = "env"
    CHECKPOINT_PREPARE = "checkpoint_prepare"
    CHECKPOINT_OP = "checkpoint_op"
    ROUTER_BACKEND = "router_backend"


class DeadlineOutcome(StrEnum):
    COMPLETED = "completed"
    FIRED = "fired"
    CANCELLED = "cancelled"
    ERROR = "error"
    OPEN = "open"  # only in views: a deadline still alive


class DeadlineHolder(StrEnum):
    COLOCATED_TRAINING = "colocated_training"
    GYM_CHECKPOINT = "gym_checkpoint"


class StateWhenFired(StrEnum):
    RUNNING = "running"
    PARKED = "parked"
    HELD = "held"
    UNKNOWN = "unknown"


class RolloutOutcome(StrEnum):
    """Outcome of a prompt group (rl.rollout.prompt)."""

    COMMITTED = "committed"
    SKIPPED = "skipped"
    RAISED = "raised"


class AttemptOutcome(StrEnum):
    """Outcome of one RL try (rl.rollout.attempt)."""

    COMMITTED = "committed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class FailureClass(StrEnum):
    INFRA = "infra"
    DATA = "data"


class ExecutionState(StrEnum):
    RUNNING = "running"
    PARK_REQUESTED = "park_requested"
    PARKED = "parked"
    COMPLETED = "completed"
    RETIRED = "retired"


class ParkedBoundaryState(StrEnum):
    WITH_BOUNDARY = "parked_with_boundary"
    WITHOUT_BOUNDARY = "parked_without_boundary"


class CutOutcome(StrEnum):
    DURABLE = "durable"
    FAILED = "failed"
    SKIPPED = "skipped"


class RunSource(StrEnum):
    LIVE = "live"
    IMPORT = "import"
    REPLAY = "replay"


class StallAction(StrEnum):
    WARN = "warn"
    ABORT = "abort"


class IncidentKind(StrEnum):
    """The incident patterns (docs/domain/incidents.md); each is a SQL view of this name in the
    store, unioned into ``incidents``."""

    DEADLINE_FIRED_WHILE_PARKED = "deadline_fired_while_parked"  # P1
    STRANDED_COMPLETION = "stranded_completion"  # P1/P2
    STALL = "stall"  # P3
    QUARANTINE = "quarantine"  # P4
    ROUTER_FLEET_DIVERGENCE = "router_fleet_divergence"  # P4
    WEDGED_BACKEND = "wedged_backend"  # P5
    RETRY_STORM = "retry_storm"  # P6
    PREPARE_BLOCKED = "prepare_blocked"  # P7
    EXPORT_FAILED = "export_failed"  # P8
    LEASE_EXPIRED = "lease_expired"  # P9
    LATE_RETIRED_ATTEMPT = "late_retired_attempt"  # P10
    REDISPATCH_EXHAUSTED = "redispatch_exhausted"  # P11
    DATA_FAILURE_CONFIG = "data_failure_config"  # P12
    STALE_WEIGHTS_SERVING = "stale_weights_serving"  # P13
    ENV_UNHEALTHY = "env_unhealthy"  # P14
    CUT_DEGRADED = "cut_degraded"  # P15
    ENGINE_WEDGED = "engine_wedged"  # P16, from engines' own /metrics
    ENGINE_SATURATED = "engine_saturated"  # P17
    ENGINE_BACKLOG_WHILE_HEALTHY = "engine_backlog_while_healthy"  # P18
