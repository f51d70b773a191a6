"""The SDK's features beyond the bare protocol, driven by hand (no server): handler
registries, several frontends, retryable vs non-retryable errors, cooperative
cancellation, the task's identity on the context, and the client's result conversion."""

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
from orbit_worker._proto import common_pb2, worker_pb2, workflow_pb2
from orbit_worker.client import _plan, _result


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
