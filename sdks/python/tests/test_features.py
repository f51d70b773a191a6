"""The SDK's features beyond the bare protocol, driven by hand (no server): handler
registries, several frontends, retryable vs non-retryable errors, cooperative
cancellation, the task's identity on the context, and the client's conversions and
argument checks (its requests caught by a stand-in stub)."""

import asyncio
import platform
import threading

import pytest

import orbit_worker
from orbit_worker import (
    CANCELLED,
    Client,
    NonRetryableError,
    Registry,
    RetryableError,
    TaskContext,
    Worker,
    split_addresses,
    to_proto_value,
)
import datetime

from orbit_worker._proto import admin_pb2, common_pb2, worker_pb2, workflow_pb2
from orbit_worker.client import _plan, _rate_limit, _result


def task_message(token, task, input=None, attempt=1, key="exec-1/0/step"):
    t = worker_pb2.ServerMessage.Task(
        token=token, task=task, version="1", attempt=attempt, idempotency_key=key, execution_id="exec-1"
    )
    t.trace_context.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    if input is not None:
        t.input.CopyFrom(to_proto_value(input))
    return worker_pb2.ServerMessage(task=t)


def cancel_message(token, reason="execution cancelled"):
    return worker_pb2.ServerMessage(cancel=worker_pb2.ServerMessage.Cancel(token=token, reason=reason))


def drain_queue(q):
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


async def start(w):
    from concurrent.futures import ThreadPoolExecutor

    w._loop = asyncio.get_running_loop()
    w._wake = asyncio.Event()
    w._executor = ThreadPoolExecutor(max_workers=w.max_concurrency)
    w._out = asyncio.Queue()
    w._grant()


async def settle(w, token, within=10.0):
    deadline = asyncio.get_running_loop().time() + within
    while token in w._running:
        assert asyncio.get_running_loop().time() < deadline, f"{token} still running"
        await asyncio.sleep(0.01)


def fails(w):
    return {m.fail.token: m.fail.error for m in drain_queue(w._out) if m.HasField("fail")}


def test_hello_names_the_sdk_and_the_runtime():
    w = Worker("h:1", worker_id="w")
    w.register("t", "1", lambda ctx: None)
    hello = w.hello().hello
    assert hello.sdk == f"orbit-python {orbit_worker.__version__}"
    assert hello.runtime == f"python {platform.python_version()}"


def test_a_registry_built_elsewhere_and_decorators_combine():
    registry = Registry()

    @registry.task("a", "1")
    def a(ctx):
        return 1

    registry.register("b", "2", lambda ctx: 2)
    w = Worker("h:1", worker_id="w", registry=registry)

    @w.task("c")
    async def c(ctx):
        return 3

    tasks = {(t.name, t.version) for t in w.hello().hello.tasks}
    assert tasks == {("a", "1"), ("b", "2"), ("c", "1")}
    with pytest.raises(ValueError):
        registry.register("", "1", a)


def test_several_frontends_are_tried_in_turn():
    assert split_addresses("a:1, b:2,,") == ["a:1", "b:2"]
    assert split_addresses(["a:1", "https://b:2"]) == ["a:1", "https://b:2"]
    with pytest.raises(ValueError):
        split_addresses(" , ")
    w = Worker(["a:1", "b:2", "c:3"], worker_id="w", bearer_token="tok")
    seen = []
    for _ in range(4):
        seen.append(w._connections[w._current].target)
        w._next_address()
    assert seen == ["a:1", "b:2", "c:3", "a:1"]
    assert all(c.metadata == (("authorization", "Bearer tok"),) for c in w._connections)


def test_retryable_and_non_retryable_errors():
    async def scenario():
        w = Worker("h:1", worker_id="w", max_concurrency=4)

        @w.task("flaky")
        def flaky(ctx):
            raise RetryableError("FLAKY", f"attempt {ctx.attempt}", details={"n": ctx.attempt})

        @w.task("declined")
        async def declined(ctx):
            raise NonRetryableError("CARD_DECLINED", "no funds")

        await start(w)
        w._on_server_message(task_message("t1", "flaky", attempt=2))
        w._on_server_message(task_message("t2", "declined"))
        await settle(w, "t1")
        await settle(w, "t2")
        errors = fails(w)
        assert (errors["t1"].code, errors["t1"].message, errors["t1"].retryable) == ("FLAKY", "attempt 2", True)
        assert orbit_worker.from_proto_value(errors["t1"].details) == {"n": 2}
        assert (errors["t2"].code, errors["t2"].retryable) == ("CARD_DECLINED", False)

    asyncio.run(scenario())


def test_the_context_carries_identity_attempt_and_trace():
    async def scenario():
        w = Worker("h:1", worker_id="w")
        seen = {}

        @w.task("look")
        def look(ctx: TaskContext):
            seen.update(key=ctx.idempotency_key, attempt=ctx.attempt, tp=ctx.traceparent, input=ctx.input)
            return {}

        await start(w)
        w._on_server_message(task_message("t1", "look", {"x": 1}, attempt=3, key="e/0/s"))
        await settle(w, "t1")
        assert seen == {
            "key": "e/0/s",
            "attempt": 3,
            "tp": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "input": {"x": 1},
        }

    asyncio.run(scenario())


def test_cancellation_reaches_a_thread_handler_cooperatively():
    async def scenario():
        w = Worker("h:1", worker_id="w")
        observed = threading.Event()

        @w.task("beat")
        def beat(ctx):
            n = 0
            while not ctx.wait(0.01):
                n += 1
                ctx.heartbeat({"beats": n})
            observed.set()
            return {"ignored": True}  # reported as CANCELLED all the same

        await start(w)
        w._on_server_message(task_message("t1", "beat"))
        await asyncio.sleep(0.1)
        w._on_server_message(cancel_message("t1", "stop"))
        await settle(w, "t1")
        sent = drain_queue(w._out)
        assert observed.is_set()
        beats = [m for m in sent if m.HasField("heartbeat")]
        assert beats and beats[0].heartbeat.tokens == ["t1"]
        failed = [m.fail.error for m in sent if m.HasField("fail")]
        assert [(e.code, e.message, e.retryable) for e in failed] == [(CANCELLED, "stop", False)]

    asyncio.run(scenario())


def test_cancellation_reaches_a_coroutine_handler_through_its_event():
    async def scenario():
        w = Worker("h:1", worker_id="w", cancel_grace=30.0)
        cleaned_up = asyncio.Event()

        @w.task("wait")
        async def wait(ctx):
            cancelled = await ctx.sleep(3600)
            assert cancelled and ctx.cancel_event.is_set() and ctx.cancel_reason == "bye"
            cleaned_up.set()  # the handler ran to its end: cooperative, not CancelledError
            return None

        await start(w)
        w._on_server_message(task_message("t1", "wait"))
        await asyncio.sleep(0.05)
        w._on_server_message(cancel_message("t1", "bye"))
        await settle(w, "t1")
        assert cleaned_up.is_set()
        assert [e.code for e in fails(w).values()] == [CANCELLED]

    asyncio.run(scenario())


def test_a_coroutine_that_ignores_the_cancel_is_cancelled_after_the_grace():
    async def scenario():
        w = Worker("h:1", worker_id="w", cancel_grace=0.05)

        @w.task("stubborn")
        async def stubborn(ctx):
            await asyncio.sleep(3600)

        await start(w)
        w._on_server_message(task_message("t1", "stubborn"))
        await asyncio.sleep(0.01)
        w._on_server_message(cancel_message("t1"))
        await settle(w, "t1")
        assert [e.code for e in fails(w).values()] == [CANCELLED]

    asyncio.run(scenario())


def test_the_client_turns_results_into_plain_values():
    r = workflow_pb2.ExecutionResult(execution_id="e", run=1, status=common_pb2.EXECUTION_STATUS_FAILED)
    r.error.CopyFrom(common_pb2.TaskError(code="CARD_DECLINED", message="no", retryable=False))
    got = _result(r)
    assert (got.status, got.output, got.error["code"], got.error["retryable"]) == ("FAILED", None, "CARD_DECLINED", False)
    ok = workflow_pb2.ExecutionResult(execution_id="e", run=1, status=common_pb2.EXECUTION_STATUS_COMPLETED)
    ok.output.CopyFrom(to_proto_value({"n": 1}))
    assert (_result(ok).status, _result(ok).output) == ("COMPLETED", {"n": 1})


def test_the_client_checks_its_options_like_the_worker():
    with pytest.raises(ValueError, match="needs a TLS CA"):
        Client("https://h:1", tls_ca="")
    c = Client(["a:1", "b:2"], bearer_token="tok", tls_ca="")
    assert [o.target for o in c._connections] == ["a:1", "b:2"]
    c.close()


def test_the_client_turns_a_restore_plan_into_plain_values():
    p = workflow_pb2.RestorePlan(
        through_seq=7, kept=["a"], forgotten=["charge", "ship"], signals_after=2, version="1", safe=False
    )
    p.changes.add(kind="added", step="d", detail="new", safe=False, reason="r")
    assert _plan(p) == {
        "through_seq": 7,
        "kept": ["a"],
        "forgotten": ["charge", "ship"],
        "signals_after": 2,
        "version": "1",
        "changes": [{"kind": "added", "step": "d", "detail": "new", "safe": False, "reason": "r"}],
        "safe": False,
    }


def test_a_reset_names_exactly_one_point_before_anything_is_sent():
    # Nothing listens on the address: the refusal comes before a call would fail.
    c = Client("127.0.0.1:1")
    for bad in ({}, {"step": "a", "seq": 3}):
        with pytest.raises(ValueError, match="exactly one of step= or seq="):
            c.reset("e", **bad)
    c.close()


class _Recorder:
    """A stand-in for a generated stub: records each request and answers ``answer``."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = []

    def __getattr__(self, method):
        def call(request, metadata=None, timeout=None):
            self.requests.append((method, request))
            return self.answer

        return call


def test_a_start_sends_its_priority_and_refuses_one_out_of_range():
    c = Client("127.0.0.1:1")
    stub = _Recorder(workflow_pb2.StartExecutionResponse(execution_id="e-1", run=1, created=True))
    c._workflows = lambda ch: stub
    assert c.start("orders", {"n": 1}, execution_id="e-1", priority=1) == "e-1"
    assert c.start("orders") == "e-1"
    (_, first), (_, second) = stub.requests
    assert (first.workflow, first.execution_id, first.priority) == ("orders", "e-1", 1)
    assert second.priority == 0  # unset: the workflow's priority, else 3
    for bad in (0, 6, -1, 2.0, "1", True):
        with pytest.raises(ValueError, match=r"1 \(dispatched first\) to 5 \(last\)"):
            c.start("orders", priority=bad)
    assert len(stub.requests) == 2
    c.close()


def test_start_execution_says_whether_the_start_created_the_execution():
    c = Client("127.0.0.1:1")
    answer = workflow_pb2.StartExecutionResponse(execution_id="e-1", run=1, created=False, version="2")
    c._workflows = lambda ch: _Recorder(answer)
    started = c.start_execution("orders", {"account": "a"})
    assert started == {"execution_id": "e-1", "run": 1, "created": False, "version": "2", "definition_hash": ""}
    answer.created = True
    assert c.start_execution("orders")["created"] is True
    c.close()


def test_rate_limits_are_set_listed_and_deleted_through_the_admin_service():
    stored = admin_pb2.RateLimit(name="payments-api", limit=10)
    stored.period.FromTimedelta(datetime.timedelta(seconds=1))
    stored.updated_at.FromJsonString("2026-01-02T03:04:05Z")
    c = Client("127.0.0.1:1")
    stub = _Recorder(admin_pb2.SetRateLimitResponse(rate_limit=stored))
    c._admin = lambda ch: stub
    got = c.set_rate_limit("payments-api", 10, 1)
    assert got == {"name": "payments-api", "limit": 10, "period_seconds": 1.0, "updated_at": "2026-01-02T03:04:05Z"}
    c.set_rate_limit("export", 500, datetime.timedelta(minutes=1, milliseconds=500))
    (m1, r1), (m2, r2) = stub.requests
    assert (m1, r1.rate_limit.name, r1.rate_limit.limit, r1.rate_limit.period.seconds) == ("SetRateLimit", "payments-api", 10, 1)
    assert (r2.rate_limit.period.seconds, r2.rate_limit.period.nanos) == (60, 500_000_000)
    for limit, period, says in ((0, 1, "limit"), (1.5, 1, "limit"), (5, 0, "period"), (5, datetime.timedelta(seconds=-1), "period")):
        with pytest.raises(ValueError, match=says):
            c.set_rate_limit("x", limit, period)
    assert len(stub.requests) == 2

    stub.answer = admin_pb2.ListRateLimitsResponse(rate_limits=[stored, admin_pb2.RateLimit(name="bare", limit=1)])
    assert [r["name"] for r in c.list_rate_limits()] == ["payments-api", "bare"]
    stub.answer = admin_pb2.DeleteRateLimitResponse()
    assert c.delete_rate_limit("payments-api") is None
    assert [(m, r) for m, r in stub.requests[-2:]] == [
        ("ListRateLimits", admin_pb2.ListRateLimitsRequest(page_size=1000)),
        ("DeleteRateLimit", admin_pb2.DeleteRateLimitRequest(name="payments-api")),
    ]
    c.close()


def test_a_rate_limit_without_a_change_time_reads_none():
    assert _rate_limit(admin_pb2.RateLimit(name="n", limit=3))["updated_at"] is None


def test_describe_carries_the_flow_control_of_pending_tasks():
    d = workflow_pb2.DescribeExecutionResponse()
    t = d.execution.pending_tasks.add(unit="charge", attempt=1, priority=2, concurrency_key="tenant-7", rate_limit_key="payments-api")
    t.waiting_on = common_pb2.FLOW_WAIT_RATE_LIMIT
    d.execution.pending_tasks.add(unit="ship", attempt=1, priority=3)
    c = Client("127.0.0.1:1")
    c._workflows = lambda ch: _Recorder(d)
    charge, ship = c.describe("e-1")["pendingTasks"]
    assert (charge["priority"], charge["concurrencyKey"], charge["rateLimitKey"], charge["waitingOn"]) == (
        2,
        "tenant-7",
        "payments-api",
        "FLOW_WAIT_RATE_LIMIT",
    )
    assert ship["priority"] == 3 and "waitingOn" not in ship and "concurrencyKey" not in ship
    c.close()
