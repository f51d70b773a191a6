"""Unit tests of the pure pieces of orbit_worker: value conversion, credits, the outbox and
the session state machine driven by hand (no server). Run: python -m pytest sdks/python
(with the package installed: pip install 'sdks/python[test,otel]').
"""

import asyncio
import math

import orbit_worker
from orbit_worker import (
    CANCELLED,
    UNHANDLED_EXCEPTION,
    Credits,
    Outbox,
    TaskFailure,
    Worker,
    from_proto_value,
    to_proto_value,
)
from google.protobuf import struct_pb2
from orbit_worker._proto import worker_pb2
from orbit_worker.messages import complete_message, fail_message


def roundtrip(obj):
    wire = to_proto_value(obj).SerializeToString()
    value = struct_pb2.Value()
    value.ParseFromString(wire)
    return from_proto_value(value)


def test_whole_numbers_become_ints():
    assert roundtrip(1500) == 1500 and isinstance(roundtrip(1500), int)
    assert roundtrip(1500.0) == 1500 and isinstance(roundtrip(1500.0), int)
    assert roundtrip(-3) == -3
    assert roundtrip(2**53) == 2**53 and isinstance(roundtrip(2**53), int)
    assert isinstance(roundtrip(-(2**53)), int)
    assert isinstance(roundtrip(2.0**60), float)


def test_fractions_stay_floats():
    assert roundtrip(1.5) == 1.5
    assert roundtrip(-0.25) == -0.25


def test_bool_is_not_a_number():
    assert roundtrip(True) is True
    assert roundtrip(False) is False
    assert to_proto_value(True).WhichOneof("kind") == "bool_value"


def test_non_finite_numbers_read_as_none():
    for n in (math.nan, math.inf, -math.inf):
        assert from_proto_value(struct_pb2.Value(number_value=n)) is None


def test_unset_reads_as_none():
    assert from_proto_value(None) is None
    assert from_proto_value(struct_pb2.Value()) is None


def test_nested_document_round_trips():
    doc = {
        "order_id": "o-1",
        "amount": 1500,
        "ratio": 0.5,
        "ok": True,
        "none": None,
        "items": [{"sku": "a"}, {"sku": "b", "qty": 2}],
        "empty": {},
        "list": [],
        "unicode": "héllo ✓",
    }
    assert roundtrip(doc) == doc
    assert roundtrip((1, 2)) == [1, 2]


def test_non_json_values_are_rejected():
    for bad in (object(), {1: "x"}, {"a": {1, 2}}):
        try:
            to_proto_value(bad)
        except TypeError:
            pass
        else:
            raise AssertionError(f"{bad!r} should not convert")


def test_credits_never_exceed_max():
    c = Credits(2)
    assert c.grant() == 2
    assert c.grant() == 0
    assert c.take()
    c.start()
    assert c.grant() == 0, "a delivered task does not return its credit"
    c.finish()
    assert c.grant() == 1
    assert c.take() and c.take()
    assert not c.take(), "a task beyond the grant is refused"


def test_credits_after_reconnect_keep_running_slots():
    c = Credits(3)
    c.grant()
    for _ in range(2):
        assert c.take()
        c.start()
    c.stream_reset()
    assert c.grant() == 1


def test_outbox_ack_and_resend_order():
    o = Outbox(capacity=2)
    o.push("t3", "m3")
    o.push("t1", "m1")
    assert list(o.pending()) == ["m3", "m1"]
    assert o.is_full()
    assert o.get("t1") == "m1"
    assert o.ack("t3")
    assert not o.ack("t3"), "a second ack is a no-op"
    assert not o.ack("unknown")
    assert list(o.pending()) == ["m1"]
    assert not o.is_full()
    o.push("t1", "m1b")
    assert len(o) == 1 and o.get("t1") == "m1b"


# -- the state machine, driven by hand ------------------------------------------------


def make_worker(max_concurrency=2):
    w = Worker("127.0.0.1:1", worker_id="w-test", max_concurrency=max_concurrency)

    @w.task("echo", "1")
    def echo(ctx):
        return ctx.input

    @w.task("boom", "1")
    def boom(ctx):
        raise RuntimeError("kaboom")

    @w.task("declined", "1")
    async def declined(ctx):
        raise TaskFailure("CARD_DECLINED", "no funds", retryable=False, details={"x": 1})

    @w.task("slow", "1")
    async def slow(ctx):
        ctx.heartbeat({"progress": 0.5})
        await asyncio.sleep(3600)
        return {}

    return w


def task_message(token, task, input=None):
    t = worker_pb2.ServerMessage.Task(token=token, task=task, version="1", attempt=1)
    if input is not None:
        t.input.CopyFrom(to_proto_value(input))
    return worker_pb2.ServerMessage(task=t)


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


async def settle(w, token):
    while token in w._running:
        await asyncio.sleep(0.01)


def test_hello_lists_tasks():
    w = make_worker()
    hello = w.hello().hello
    assert hello.worker_id == "w-test"
    assert hello.sdk == f"orbit-python {orbit_worker.__version__}" and hello.runtime.startswith("python 3.")
    assert {(t.name, t.version) for t in hello.tasks} == {
        ("echo", "1"),
        ("boom", "1"),
        ("declined", "1"),
        ("slow", "1"),
    }


def test_hello_carries_the_labels_steps_route_on():
    w = Worker(worker_id="w-gpu", labels={"pool": "gpu", "region": "eu"})
    assert dict(w.hello().hello.labels) == {"pool": "gpu", "region": "eu"}
    assert dict(Worker(worker_id="w").hello().hello.labels) == {}
    for bad in ({"pool": 1}, {2: "gpu"}):
        try:
            Worker(worker_id="w", labels=bad)
        except TypeError as e:
            assert "strings" in str(e)
        else:
            raise AssertionError(f"{bad} accepted")
    try:
        Worker(worker_id="w", labels={"": "x"})
    except ValueError:
        pass
    else:
        raise AssertionError("an empty label name accepted")


def test_task_completes_and_credit_is_regranted():
    async def scenario():
        w = make_worker()
        await start(w)
        assert [m.credits.n for m in drain_queue(w._out)] == [2]
        w._on_server_message(task_message("t1", "echo", {"amount": 1500}))
        await settle(w, "t1")
        sent = drain_queue(w._out)
        assert sent[0].WhichOneof("kind") == "complete"
        assert sent[0].complete.token == "t1"
        assert from_proto_value(sent[0].complete.output) == {"amount": 1500}
        assert sent[1].credits.n == 1
        assert len(w._outbox) == 1
        w._on_server_message(
            worker_pb2.ServerMessage(ack=worker_pb2.ServerMessage.Ack(token="t1", accepted=True))
        )
        assert len(w._outbox) == 0

    asyncio.run(scenario())


def test_exception_becomes_unhandled_and_failure_is_kept():
    async def scenario():
        w = make_worker()
        await start(w)
        w._on_server_message(task_message("t1", "boom"))
        w._on_server_message(task_message("t2", "declined"))
        await settle(w, "t1")
        await settle(w, "t2")
        fails = {m.fail.token: m.fail.error for m in drain_queue(w._out) if m.HasField("fail")}
        assert fails["t1"].code == UNHANDLED_EXCEPTION and fails["t1"].retryable
        assert "kaboom" in fails["t1"].message
        assert fails["t2"].code == "CARD_DECLINED" and not fails["t2"].retryable
        assert from_proto_value(fails["t2"].details) == {"x": 1}

    asyncio.run(scenario())


def test_the_periodic_heartbeat_is_complete_running_and_unacknowledged():
    # A complete heartbeat names everything the process holds: the server hands back the
    # adopted attempts of a restarted worker that it does not name.
    async def scenario():
        w = make_worker()
        await start(w)
        w._on_server_message(task_message("t1", "slow"))
        w._on_server_message(task_message("t2", "echo"))
        await settle(w, "t2")
        drain_queue(w._out)
        w._heartbeat_all()
        (sent,) = drain_queue(w._out)
        assert sent.heartbeat.complete
        assert sorted(sent.heartbeat.tokens) == ["t1", "t2"], "t1 runs, t2 is not acked yet"
        w._on_server_message(
            worker_pb2.ServerMessage(cancel=worker_pb2.ServerMessage.Cancel(token="t1", reason="done"))
        )
        await settle(w, "t1")

    asyncio.run(scenario())


def test_cancel_stops_async_handler():
    async def scenario():
        w = make_worker(max_concurrency=1)
        await start(w)
        w._on_server_message(task_message("t1", "slow"))
        await asyncio.sleep(0.01)
        w._on_server_message(
            worker_pb2.ServerMessage(
                cancel=worker_pb2.ServerMessage.Cancel(token="t1", reason="execution cancelled")
            )
        )
        await settle(w, "t1")
        sent = drain_queue(w._out)
        kinds = [m.WhichOneof("kind") for m in sent]
        assert kinds == ["credits", "heartbeat", "fail", "credits"], kinds
        assert sent[1].heartbeat.tokens == ["t1"]
        assert from_proto_value(sent[1].heartbeat.details) == {"progress": 0.5}
        assert sent[2].fail.error.code == CANCELLED
        assert sent[2].fail.error.message == "execution cancelled"

    asyncio.run(scenario())


def test_task_without_credit_is_refused():
    async def scenario():
        w = make_worker(max_concurrency=1)
        await start(w)
        w._on_server_message(task_message("t1", "slow"))
        w._on_server_message(task_message("t2", "echo"))
        sent = drain_queue(w._out)
        assert sent[-1].fail.token == "t2"
        assert sent[-1].fail.error.code == orbit_worker.WORKER_OVER_CAPACITY
        assert list(w._running) == ["t1"]
        w._running["t1"].task.cancel()

    asyncio.run(scenario())


def test_drain_grants_nothing_and_waits_for_acks():
    async def scenario():
        w = make_worker()
        await start(w)
        drain_queue(w._out)
        w._on_server_message(task_message("t1", "echo", "x"))
        w._begin_drain()
        await settle(w, "t1")
        kinds = [m.WhichOneof("kind") for m in drain_queue(w._out)]
        assert kinds == ["drain", "complete"], kinds
        assert not w._is_done()
        w._on_server_message(
            worker_pb2.ServerMessage(ack=worker_pb2.ServerMessage.Ack(token="t1", accepted=False))
        )
        assert w._is_done()

    asyncio.run(scenario())


# --------------------------------------------------------------------------------------
# Payload limits


def _nested_dicts(depth):
    v = 1
    for _ in range(depth):
        v = {"k": v}
    return v


def _nested_lists(depth):
    v = 1
    for _ in range(depth):
        v = [v]
    return v


def _deepest(wrap, shape):
    """The deepest ``shape(d)`` that Python protobuf still decodes inside ``wrap``."""
    d = 0
    while True:
        try:
            # Building the message copies (encodes and decodes) sub-messages in upb, so it
            # can hit the limit too.
            message = wrap(shape(d + 1))
            type(message).FromString(message.SerializeToString())
        except Exception:  # noqa: BLE001 - the runtime's decode error (recursion limit)
            return d
        d += 1
        assert d < 1000, "no decode limit found"


def test_max_depth_decodes_in_python():
    """The depth limit (docs/events.md, "Payload limits") stays below the Python runtime's
    decode limit with margin, in the deepest messages the server sends a payload in (the
    Rust side: libs/server-kit/tests/payload_depth.rs)."""
    from orbit_worker._proto import common_pb2, workflow_pb2

    def task(v):
        return worker_pb2.ServerMessage(task=worker_pb2.ServerMessage.Task(input=to_proto_value(v)))

    def history(v):
        event = common_pb2.HistoryEvent(seq=1, event_type="StepFailed")
        event.payload.update({"step": "s", "error": {"code": "E", "details": v}})
        return workflow_pb2.GetHistoryResponse(events=[event])

    def describe(v):
        error = common_pb2.TaskError(code="E", details=to_proto_value(v))
        unit = common_pb2.UnitSummary(key="s", last_error=error)
        return workflow_pb2.DescribeExecutionResponse(
            execution=common_pb2.ExecutionDescription(units=[unit])
        )

    shallowest = min(
        _deepest(wrap, shape)
        for wrap in (task, history, describe)
        for shape in (_nested_dicts, _nested_lists)
    )
    print(f"python protobuf ({_runtime()}): shallowest decodable depth {shallowest}")
    assert orbit_worker.MAX_DEPTH + 4 <= shallowest


def _runtime():
    from google.protobuf.internal import api_implementation

    return api_implementation.Type()


def test_results_over_the_limits_are_sent_as_a_fail_with_the_payload_code():
    ok = complete_message("t", _nested_lists(orbit_worker.MAX_DEPTH))
    assert ok.WhichOneof("kind") == "complete"
    deep = complete_message("t", _nested_lists(orbit_worker.MAX_DEPTH + 1))
    assert deep.WhichOneof("kind") == "fail"
    assert deep.fail.error.code == "PAYLOAD_TOO_DEEP" and not deep.fail.error.retryable
    big = complete_message("t", [1] * 300_000)  # small as JSON, 3.3 MB as protobuf
    assert big.fail.error.code == "PAYLOAD_TOO_LARGE"
    failed = fail_message("t", "CARD_DECLINED", "no", True, _nested_dicts(60))
    assert failed.fail.error.code == "PAYLOAD_TOO_DEEP"
    assert "CARD_DECLINED" in failed.fail.error.message
    assert not failed.fail.error.HasField("details")


def test_payload_depth_walks_without_recursion():
    v = None
    for _ in range(100_000):
        v = [v]
    assert orbit_worker.payload_depth(v) == orbit_worker.MAX_DEPTH + 1
    assert orbit_worker.payload_depth({"a": [1, {"b": {}}]}) == 4


# --------------------------------------------------------------------------------------
# Connection options: TLS, client certificate and token, from arguments or ORBIT_* variables


def _options(address="127.0.0.1:7233", environ=None, **kwargs):
    return orbit_worker.connection_options(address, environ=environ or {}, **kwargs)


def _refused(message_part, address="127.0.0.1:7233", environ=None, **kwargs):
    try:
        _options(address, environ, **kwargs)
    except ValueError as e:
        assert message_part in str(e), str(e)
    else:
        raise AssertionError(f"{address} {kwargs} {environ} should be refused")


def test_plain_text_without_options():
    o = _options()
    assert (o.target, o.tls, o.metadata) == ("127.0.0.1:7233", False, ())
    assert _options("http://h:1").target == "h:1", "the scheme is not part of a gRPC target"


def test_a_ca_turns_tls_on_and_the_token_becomes_bearer_metadata():
    o = _options("h:1", tls_ca="ca.pem", tls_client_cert="c.pem", tls_client_key="k.pem", bearer_token="s3cr3t")
    assert (o.target, o.tls, o.ca, o.cert, o.key) == ("h:1", True, "ca.pem", "c.pem", "k.pem")
    assert o.metadata == (("authorization", "Bearer s3cr3t"),)
    assert _options("https://h:1/", tls_ca="ca.pem").target == "h:1"


def test_options_default_to_the_orbit_variables_and_arguments_win():
    env = {
        "ORBIT_TLS_CA": "env-ca.pem",
        "ORBIT_TLS_CLIENT_CERT": "env-c.pem",
        "ORBIT_TLS_CLIENT_KEY": "env-k.pem",
        "ORBIT_TOKEN": "env-token",
    }
    o = _options("h:1", env)
    assert (o.tls, o.ca, o.cert, o.key) == (True, "env-ca.pem", "env-c.pem", "env-k.pem")
    assert o.metadata == (("authorization", "Bearer env-token"),)
    o = _options("h:1", env, tls_ca="arg-ca.pem", bearer_token="arg-token")
    assert o.ca == "arg-ca.pem" and o.metadata == (("authorization", "Bearer arg-token"),)
    # An empty value (argument or variable) means none, as in the Rust tls_from_env.
    o = _options("h:1", dict(env, ORBIT_TOKEN=""), tls_ca="", tls_client_cert="", tls_client_key="")
    assert (o.tls, o.ca, o.cert, o.metadata) == (False, None, None, ())


def test_inconsistent_options_are_refused_like_the_rust_client():
    _refused("needs a TLS CA", "https://h:1")
    _refused("is http://", "http://h:1", tls_ca="ca.pem")
    _refused("is http://", "h:1", tls_client_cert="c.pem", tls_client_key="k.pem")
    _refused("needs its key", "h:1", tls_ca="ca.pem", tls_client_cert="c.pem")
    _refused("needs its key", "h:1", {"ORBIT_TLS_CLIENT_KEY": "k.pem"}, tls_ca="ca.pem")
    _refused("scheme", "unix:///tmp/s")
    _refused("not host:port", "http://h:1/path")
    _refused("printable ASCII", bearer_token="two words")
    _refused("printable ASCII", bearer_token="tok\n")


def test_the_worker_reads_the_pem_files_at_construction(tmp_path):
    missing = tmp_path / "missing-ca.pem"
    try:
        Worker("h:1", tls_ca=str(missing), bearer_token="t")
    except OSError as e:
        assert "missing-ca.pem" in str(e)
    else:
        raise AssertionError("a missing CA file was accepted")
    w = Worker("h:1", bearer_token="t", tls_ca="")
    assert w._metadata == (("authorization", "Bearer t"),)


def test_a_refusal_prints_one_line_and_exits_with_the_refused_code(capsys):
    class Refusing:
        def __init__(self, **kwargs):
            assert kwargs["tls_ca"] == "ca.pem" and kwargs["bearer_token"] == "wrong"

        async def run(self, shutdown):
            raise orbit_worker.WorkerRejected("UNAUTHENTICATED: unknown bearer token")

    args = orbit_worker.parse_common_args("t", ["--tls-ca", "ca.pem", "--token", "wrong"])
    try:
        orbit_worker.run_example(Refusing, args)
    except SystemExit as e:
        assert e.code == orbit_worker.EXIT_REFUSED
    else:
        raise AssertionError("run_example returned after a refusal")
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["orbit worker: refused by the server: UNAUTHENTICATED: unknown bearer token"], err


def test_unusable_options_exit_with_the_usage_code(capsys):
    args = orbit_worker.parse_common_args("t", ["--address", "https://h:1", "--tls-ca", ""])
    try:
        orbit_worker.run_example(lambda **kw: Worker(**kw), args)
    except SystemExit as e:
        assert e.code == orbit_worker.EXIT_USAGE
    else:
        raise AssertionError("run_example started with unusable options")
    assert "needs a TLS CA" in capsys.readouterr().err
