"""A small synchronous client for the public ``orbit.v1.WorkflowService`` (and
``AdminService.ListWorkers`` and the named rate limits): start (with a priority), signal,
query, update, cancel, describe, watch, migrate, reset and fork.

::

    from orbit_worker import Client

    with Client("127.0.0.1:7233") as client:
        client.start("hello", {"name": "Ada"}, execution_id="hello-1")
        result = client.result("hello-1", timeout=30)
        print(result.status, result.output)        # COMPLETED {'greeting': 'Hello, Ada!'}

The connection options are the worker's (:mod:`orbit_worker.connection`): TLS, mutual TLS
and the bearer token, each from its ``ORBIT_*`` variable when not given. With several
addresses a call that finds its frontend ``UNAVAILABLE`` is tried once on each of the
others (start, signal, update and cancel carry request ids or execution ids, so a retry
never doubles an effect).
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TypeVar, Union

import grpc
from google.protobuf import json_format, struct_pb2

from ._proto import admin_pb2, admin_pb2_grpc, common_pb2, workflow_pb2, workflow_pb2_grpc
from .connection import Addresses, ConnectionOptions, connection_list
from .values import Json, from_proto_value, to_proto_value

T = TypeVar("T")


@dataclass
class ExecutionResult:
    """How a run ended: ``status`` (``"COMPLETED"``, ``"FAILED"``, ``"CANCELLED"``, ...),
    its ``output`` or its ``error`` (``{"code", "message", "retryable", "details"}``)."""

    execution_id: str
    run: int
    status: str
    output: Json = None
    error: Optional[Dict[str, Any]] = None


@dataclass
class Event:
    """One history event: ``seq``, ``run``, ``type`` (e.g. ``StepCompleted``), ``step``
    and its ``payload`` (JSON)."""

    seq: int
    run: int
    type: str
    step: str
    payload: Dict[str, Any] = field(default_factory=dict)


def _status_name(status: int) -> str:
    return common_pb2.ExecutionStatus.Name(status).replace("EXECUTION_STATUS_", "")


def _result(r: Any) -> ExecutionResult:
    error = None
    if r.HasField("error"):
        error = {
            "code": r.error.code,
            "message": r.error.message,
            "retryable": r.error.retryable,
            "details": from_proto_value(r.error.details) if r.error.HasField("details") else None,
        }
    output = from_proto_value(r.output) if r.HasField("output") else None
    return ExecutionResult(r.execution_id, r.run, _status_name(r.status), output, error)


def _event(e: Any) -> Event:
    payload = json_format.MessageToDict(e.payload) if e.HasField("payload") else {}
    return Event(e.seq, e.run, e.event_type, e.step, payload)


def _rate_limit(r: Any) -> Dict[str, Any]:
    """A ``RateLimit`` as a dict: ``{"name", "limit", "period_seconds", "updated_at"}``
    (``updated_at`` RFC 3339 text, or None)."""
    return {
        "name": r.name,
        "limit": r.limit,
        "period_seconds": r.period.ToTimedelta().total_seconds(),
        "updated_at": r.updated_at.ToJsonString() if r.HasField("updated_at") else None,
    }


def _period(period: Union[float, datetime.timedelta]) -> datetime.timedelta:
    """A rate limit's window from seconds or a ``timedelta``; refuses a zero or negative one."""
    window = period if isinstance(period, datetime.timedelta) else datetime.timedelta(seconds=period)
    if window <= datetime.timedelta(0):
        raise ValueError(f"set_rate_limit: period must be positive (1 ms to 366 days), not {period!r}")
    return window


def _change(c: Any) -> Dict[str, Any]:
    return {"kind": c.kind, "step": c.step, "detail": c.detail, "safe": c.safe, "reason": c.reason}


def _plan(p: Any) -> Dict[str, Any]:
    """A ``RestorePlan`` as a dict: what a reset or a fork keeps and runs again."""
    return {
        "through_seq": p.through_seq,
        "kept": list(p.kept),
        "forgotten": list(p.forgotten),
        "signals_after": p.signals_after,
        "version": p.version,
        "changes": [_change(c) for c in p.changes],
        "safe": p.safe,
    }


class Client:
    """A client of one Orbit deployment (one or several frontends)."""

    def __init__(
        self,
        address: Addresses = "127.0.0.1:7233",
        *,
        bearer_token: Optional[str] = None,
        tls_ca: Optional[str] = None,
        tls_client_cert: Optional[str] = None,
        tls_client_key: Optional[str] = None,
        timeout: Optional[float] = 30.0,
    ) -> None:
        self._connections: List[ConnectionOptions] = connection_list(
            address, tls_ca, tls_client_cert, tls_client_key, bearer_token
        )
        self._metadata = self._connections[0].metadata
        self.timeout = timeout
        self._channels: List[Optional[grpc.Channel]] = [None] * len(self._connections)
        self._current = 0

    # -- plumbing -------------------------------------------------------------------------

    def _channel(self, i: int) -> grpc.Channel:
        channel = self._channels[i]
        if channel is None:
            c = self._connections[i]
            channel = grpc.secure_channel(c.target, c.credentials()) if c.tls else grpc.insecure_channel(c.target)
            self._channels[i] = channel
        return channel

    def _call(self, fn: Callable[[grpc.Channel], T]) -> T:
        """``fn`` on the current frontend; on ``UNAVAILABLE`` once on each other one."""
        last: Optional[grpc.RpcError] = None
        for _ in range(len(self._connections)):
            try:
                return fn(self._channel(self._current))
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:  # type: ignore[attr-defined]
                    raise
                last = e
                self._current = (self._current + 1) % len(self._connections)
        assert last is not None
        raise last

    def _workflows(self, channel: grpc.Channel) -> workflow_pb2_grpc.WorkflowServiceStub:
        return workflow_pb2_grpc.WorkflowServiceStub(channel)

    def _admin(self, channel: grpc.Channel) -> admin_pb2_grpc.AdminServiceStub:
        return admin_pb2_grpc.AdminServiceStub(channel)

    def close(self) -> None:
        """Closes the channels."""
        for channel in self._channels:
            if channel is not None:
                channel.close()
        self._channels = [None] * len(self._connections)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the API --------------------------------------------------------------------------

    def register(self, document: str) -> str:
        """Registers a workflow definition (YAML or JSON text); returns its version."""
        request = workflow_pb2.RegisterWorkflowRequest(document=document)
        response = self._call(
            lambda ch: self._workflows(ch).RegisterWorkflow(request, metadata=self._metadata, timeout=self.timeout)
        )
        return str(response.version)

    def start(
        self,
        workflow: str,
        input: Json = None,
        *,
        execution_id: str = "",
        version: str = "",
        priority: Optional[int] = None,
        memo: Optional[Dict[str, Any]] = None,
    ) -> str:
        """Starts ``workflow`` (latest version unless ``version``); returns the execution id.
        Idempotent per ``execution_id``: starting the same id again returns the same run.
        ``priority`` (1 to 5) orders the execution's tasks among those queued for a worker:
        1 is dispatched first, 5 last; None leaves it to the workflow's ``priority:``, else
        3 (a step that declares its own ``priority:`` keeps it). ``memo`` is a free JSON
        object shown by :meth:`describe` (``memo``) and never indexed.
        :meth:`start_execution` also says whether the start created the execution."""
        started = self.start_execution(
            workflow, input, execution_id=execution_id, version=version, priority=priority, memo=memo
        )
        return started["execution_id"]

    def start_execution(
        self,
        workflow: str,
        input: Json = None,
        *,
        execution_id: str = "",
        version: str = "",
        priority: Optional[int] = None,
        memo: Optional[Dict[str, Any]] = None,
    ) -> Dict[str, Any]:
        """As :meth:`start`, answering ``{"execution_id", "run", "created", "version",
        "definition_hash"}``. ``created`` is false when the id existed, or when the
        workflow's ``dedupe:`` collapsed the start into the execution of its key's window
        (docs/flow-control.md, "Debounce and singleton starts")."""
        if priority is not None and (
            isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 5
        ):
            raise ValueError(f"start: priority must be 1 (dispatched first) to 5 (last), not {priority!r}")
        request = workflow_pb2.StartExecutionRequest(
            workflow=workflow, version=version, execution_id=execution_id, priority=priority or 0
        )
        if input is not None:
            request.input.CopyFrom(to_proto_value(input))
        if memo is not None:
            if not isinstance(memo, dict):
                raise ValueError(f"start: memo must be a JSON object (a dict), not {type(memo).__name__}")
            request.memo.CopyFrom(to_proto_value(memo).struct_value)
        response = self._call(
            lambda ch: self._workflows(ch).StartExecution(request, metadata=self._metadata, timeout=self.timeout)
        )
        return {
            "execution_id": str(response.execution_id),
            "run": int(response.run),
            "created": bool(response.created),
            "version": str(response.version),
            "definition_hash": str(response.definition_hash),
        }

    def signal(self, execution_id: str, name: str, payload: Json = None, *, request_id: str = "") -> None:
        """Sends signal ``name`` with ``payload``; ``request_id`` (a fresh one when empty)
        makes a retried call count once."""
        request = workflow_pb2.SignalExecutionRequest(
            execution_id=execution_id, name=name, request_id=request_id or str(uuid.uuid4())
        )
        if payload is not None:
            request.payload.CopyFrom(to_proto_value(payload))
        self._call(lambda ch: self._workflows(ch).SignalExecution(request, metadata=self._metadata, timeout=self.timeout))

    def query(self, execution_id: str, name: str, *, at_seq: int = 0) -> Json:
        """Runs query ``name`` against the execution's state; returns its result. With
        ``at_seq`` the state is the one right after that history seq of the latest run
        (events 1..=at_seq folded, with the version the run had then); 0 means now. A seq
        past the run's last event raises ``INVALID_ARGUMENT``."""
        request = workflow_pb2.QueryExecutionRequest(execution_id=execution_id, name=name, at_seq=at_seq)
        response = self._call(
            lambda ch: self._workflows(ch).QueryExecution(request, metadata=self._metadata, timeout=self.timeout)
        )
        return from_proto_value(response.result) if response.HasField("result") else None

    def update(self, execution_id: str, name: str, args: Json = None, *, request_id: str = "") -> Json:
        """Runs update ``name`` with ``args``; returns its result once recorded."""
        request = workflow_pb2.UpdateExecutionRequest(
            execution_id=execution_id, name=name, request_id=request_id or str(uuid.uuid4())
        )
        if args is not None:
            request.args.CopyFrom(to_proto_value(args))
        response = self._call(
            lambda ch: self._workflows(ch).UpdateExecution(request, metadata=self._metadata, timeout=self.timeout)
        )
        return from_proto_value(response.result) if response.HasField("result") else None

    def migrate(
        self,
        execution_id: str,
        to_version: str,
        *,
        dry_run: bool = False,
        reason: str = "",
        request_id: str = "",
    ) -> Dict[str, Any]:
        """Moves a running execution to ``to_version`` of its workflow if every difference of
        the two step graphs is safe for its state (``dry_run``: only the diff). Returns
        ``{"from_version", "to_version", "safe", "migrated", "seq", "run", "changes": [{"kind",
        "step", "detail", "safe", "reason"}], "renames", "cancelled"}``; an unsafe migration
        raises with code ``MIGRATION_UNSAFE`` and writes nothing."""
        request = workflow_pb2.MigrateExecutionRequest(
            execution_id=execution_id,
            to_version=to_version,
            dry_run=dry_run,
            reason=reason,
            request_id=request_id if dry_run else (request_id or str(uuid.uuid4())),
        )
        r = self._call(
            lambda ch: self._workflows(ch).MigrateExecution(request, metadata=self._metadata, timeout=self.timeout)
        )
        return {
            "from_version": r.from_version,
            "to_version": r.to_version,
            "safe": r.safe,
            "migrated": r.migrated,
            "seq": r.seq,
            "run": r.run,
            "changes": [_change(c) for c in r.changes],
            "renames": dict(r.renames),
            "cancelled": list(r.cancelled),
        }

    def reset(
        self,
        execution_id: str,
        *,
        step: Optional[str] = None,
        seq: Optional[int] = None,
        drop_signals: bool = False,
        to_version: str = "",
        reason: str = "",
        request_id: str = "",
        dry_run: bool = False,
    ) -> Dict[str, Any]:
        """Resets the execution to an earlier point of its current run: just before ``step``
        first started, or right after history ``seq`` (give exactly one). The run ends and
        the execution goes on in the next run from the state at the point: steps that
        succeeded or were skipped by then are kept (not run again); work open at the point,
        steps the old run's compensation undid and every step depending on those run again.
        Signals received after the point are received again unless ``drop_signals``. A
        closed (``FAILED``, ...) execution is reopened. ``to_version`` also migrates the new
        run; ``dry_run`` only answers the plan. Returns ``{"plan": {"through_seq", "kept",
        "forgotten", "signals_after", "version", "changes", "safe"}, "reset", "run",
        "seq"}``; an impossible point raises with code ``RESET_POINT_INVALID``."""
        if (step is None) == (seq is None):
            raise ValueError("reset: give exactly one of step= or seq=")
        request = workflow_pb2.ResetExecutionRequest(
            execution_id=execution_id,
            drop_signals=drop_signals,
            to_version=to_version,
            reason=reason,
            request_id=request_id if dry_run else (request_id or str(uuid.uuid4())),
            dry_run=dry_run,
        )
        if step is not None:
            request.step = step
        else:
            request.seq = int(seq)  # type: ignore[arg-type]
        r = self._call(
            lambda ch: self._workflows(ch).ResetExecution(request, metadata=self._metadata, timeout=self.timeout)
        )
        return {"plan": _plan(r.plan), "reset": r.reset, "run": r.run, "seq": r.seq}

    def fork(
        self,
        execution_id: str,
        at_seq: int,
        new_execution_id: str,
        *,
        run: int = 0,
        version: str = "",
        reason: str = "",
        dry_run: bool = False,
    ) -> Dict[str, Any]:
        """Creates execution ``new_execution_id`` from ``execution_id``'s state right after
        history ``at_seq`` of its run ``run`` (0: the current one); the source is not
        touched. Kept and run again as for :meth:`reset`; signals the source received later
        are not given to the fork. ``version`` migrates the fork right away; ``dry_run``
        only answers the plan. Forking to the same new id again answers the existing fork
        (``created`` false). Returns ``{"plan": {...}, "created", "execution_id",
        "version"}``."""
        request = workflow_pb2.ForkExecutionRequest(
            execution_id=execution_id,
            run=run,
            at_seq=at_seq,
            new_execution_id=new_execution_id,
            version=version,
            reason=reason,
            dry_run=dry_run,
        )
        r = self._call(
            lambda ch: self._workflows(ch).ForkExecution(request, metadata=self._metadata, timeout=self.timeout)
        )
        return {"plan": _plan(r.plan), "created": r.created, "execution_id": r.execution_id, "version": r.version}

    def start_batch(
        self,
        workflow: str = "",
        migrate_to: str = "",
        *,
        reset_to_step: str = "",
        drop_signals: bool = False,
        query: str = "",
        cancel: bool = False,
        terminate: bool = False,
        signal: str = "",
        payload: Any = None,
        delete: bool = False,
        version: str = "",
        statuses: Optional[List[int]] = None,
        rate_per_second: int = 0,
        reason: str = "",
        request_id: str = "",
        dry_run: bool = False,
    ) -> Dict[str, Any]:
        """Starts a batch job migrating every execution of ``workflow`` (of ``version`` when
        given; in ``statuses``, ``ExecutionStatus`` values, RUNNING by default) to
        ``migrate_to``, at most ``rate_per_second`` a second (0: 50, at most 1000). With
        ``dry_run`` nothing starts: ``{"dry_run_total", "dry_run_items": [{"execution_id",
        "safe", "from_version", "code", "message", "changes"}]}``. Otherwise ``{"batch_id",
        "created", "batch"}`` (see :meth:`describe_batch`). docs/evolving.md, "Batches".

        With ``reset_to_step`` instead, each execution is reset to just before that step
        (:meth:`reset`; ``migrate_to`` then migrates each new run, ``drop_signals`` leaves
        out the signals after the point); a dry run's items then carry ``plan`` too.

        ``query`` selects by the list query language (docs/queries.md), ANDed with
        ``workflow``, ``version`` and ``statuses`` when given (``workflow`` is optional then,
        and without ``statuses`` the query alone decides). The action may instead be
        ``cancel=True``, ``terminate=True``, ``signal=NAME`` (with ``payload``) or
        ``delete=True``: each execution as the single-execution call does it; a finished one
        is skipped (``EXECUTION_FINISHED``), an open one is refused by ``delete``."""
        chosen = [bool(migrate_to) and not reset_to_step, bool(reset_to_step), cancel, terminate, bool(signal), delete]
        if sum(chosen) != 1:
            raise ValueError(
                "start_batch takes exactly one action: migrate_to, reset_to_step, cancel, terminate, signal or delete"
            )
        if cancel:
            action = workflow_pb2.BatchAction(cancel=workflow_pb2.BatchCancel())
        elif terminate:
            action = workflow_pb2.BatchAction(terminate=workflow_pb2.BatchTerminate())
        elif signal:
            batch_signal = workflow_pb2.BatchSignal(name=signal)
            if payload is not None:
                batch_signal.payload.CopyFrom(to_proto_value(payload))
            action = workflow_pb2.BatchAction(signal=batch_signal)
        elif delete:
            action = workflow_pb2.BatchAction(delete=workflow_pb2.BatchDelete())
        elif reset_to_step:
            action = workflow_pb2.BatchAction(
                reset=workflow_pb2.BatchReset(step=reset_to_step, drop_signals=drop_signals, to_version=migrate_to)
            )
        else:
            action = workflow_pb2.BatchAction(migrate=workflow_pb2.BatchMigrate(to_version=migrate_to))
        request = workflow_pb2.StartBatchRequest(
            selector=workflow_pb2.BatchSelector(
                workflow=workflow, version=version, statuses=statuses or [], query=query
            ),
            action=action,
            rate_per_second=rate_per_second,
            reason=reason,
            request_id=request_id if dry_run else (request_id or str(uuid.uuid4())),
            dry_run=dry_run,
        )
        r = self._call(lambda ch: self._workflows(ch).StartBatch(request, metadata=self._metadata, timeout=self.timeout))
        if dry_run:
            return {
                "dry_run_total": r.dry_run_total,
                "dry_run_items": [
                    {
                        "execution_id": i.execution_id,
                        "safe": i.safe,
                        "from_version": i.from_version,
                        "code": i.code,
                        "message": i.message,
                        "changes": [
                            {"kind": c.kind, "step": c.step, "detail": c.detail, "safe": c.safe, "reason": c.reason}
                            for c in i.changes
                        ],
                        "plan": _plan(i.plan) if i.HasField("plan") else None,
                    }
                    for i in r.dry_run_items
                ],
            }
        return {"batch_id": r.batch_id, "created": r.created, "batch": _batch(r.batch)}

    def describe_batch(self, batch_id: str) -> Dict[str, Any]:
        """A batch: ``{"batch_id", "state" ("RUNNING", "COMPLETED", "CANCELLED", "FAILED"),
        "workflow", "version", "to_version", "total", "done", "succeeded", "failed",
        "skipped", "cursor", "reason", "rate_per_second"}``; ``BATCH_NOT_FOUND`` when missing."""
        request = workflow_pb2.DescribeBatchRequest(batch_id=batch_id)
        r = self._call(lambda ch: self._workflows(ch).DescribeBatch(request, metadata=self._metadata, timeout=self.timeout))
        return _batch(r.batch)

    def list_batches(self) -> List[Dict[str, Any]]:
        """Every batch, newest first (as :meth:`describe_batch`)."""
        batches: List[Dict[str, Any]] = []
        token = ""
        while True:
            request = workflow_pb2.ListBatchesRequest(page_size=1000, page_token=token)
            r = self._call(lambda ch: self._workflows(ch).ListBatches(request, metadata=self._metadata, timeout=self.timeout))
            batches.extend(_batch(b) for b in r.batches)
            if not r.next_page_token:
                return batches
            token = r.next_page_token

    def list_batch_items(self, batch_id: str, *, only_failed: bool = False) -> List[Dict[str, Any]]:
        """Every per-execution outcome of a batch, by execution id: ``{"execution_id",
        "outcome" ("SUCCEEDED", "FAILED", "SKIPPED", "PENDING"), "code", "message", "seq"}``."""
        items: List[Dict[str, Any]] = []
        token = ""
        while True:
            request = workflow_pb2.ListBatchItemsRequest(
                batch_id=batch_id, page_size=1000, page_token=token, only_failed=only_failed
            )
            r = self._call(lambda ch: self._workflows(ch).ListBatchItems(request, metadata=self._metadata, timeout=self.timeout))
            items.extend(
                {
                    "execution_id": i.execution_id,
                    "outcome": workflow_pb2.BatchItemOutcome.Name(i.outcome).removeprefix("BATCH_ITEM_OUTCOME_"),
                    "code": i.code,
                    "message": i.message,
                    "seq": i.seq,
                }
                for i in r.items
            )
            if not r.next_page_token:
                return items
            token = r.next_page_token

    def cancel_batch(self, batch_id: str, reason: str = "") -> Dict[str, Any]:
        """Cancels a running batch: ``{"cancelled", "batch"}`` (``cancelled`` is false when it
        had ended already)."""
        request = workflow_pb2.CancelBatchRequest(batch_id=batch_id, reason=reason)
        r = self._call(lambda ch: self._workflows(ch).CancelBatch(request, metadata=self._metadata, timeout=self.timeout))
        return {"cancelled": r.cancelled, "batch": _batch(r.batch)}

    def cancel(self, execution_id: str, reason: str = "", *, request_id: str = "") -> None:
        """Requests cancellation of the execution (running steps get ``Cancel``)."""
        request = workflow_pb2.CancelExecutionRequest(
            execution_id=execution_id, reason=reason, request_id=request_id or str(uuid.uuid4())
        )
        self._call(lambda ch: self._workflows(ch).CancelExecution(request, metadata=self._metadata, timeout=self.timeout))

    def describe(self, execution_id: str, *, at_seq: int = 0) -> Dict[str, Any]:
        """The run's ``ExecutionDescription`` as a dict with the proto's JSON field names:
        ``info`` (``status`` e.g. ``"EXECUTION_STATUS_RUNNING"``, ...), ``units``,
        ``pendingTasks`` (each with ``priority``, and when flow control applies
        ``concurrencyKey``, ``rateLimitKey`` and ``waitingOn``, e.g.
        ``"FLOW_WAIT_RATE_LIMIT"``; fields at their default are left out), ``pendingTimers``,
        ``pendingAwaits``, ``pendingChildren``, and ``searchAttributes`` (the run's search
        attributes, name -> value) and ``memo`` (the start's memo, or None). With
        ``at_seq`` the run as it stood right after that history seq (events 1..=at_seq
        folded, with the version it had then); 0 means now. A seq past the run's last event
        raises ``INVALID_ARGUMENT``."""
        request = workflow_pb2.DescribeExecutionRequest(execution_id=execution_id, at_seq=at_seq)
        response = self._call(
            lambda ch: self._workflows(ch).DescribeExecution(request, metadata=self._metadata, timeout=self.timeout)
        )
        described = json_format.MessageToDict(response.execution)
        described["searchAttributes"] = {
            name: from_proto_value(value) for name, value in response.search_attributes.items()
        }
        memo = None
        if response.HasField("memo"):
            memo = from_proto_value(struct_pb2.Value(struct_value=response.memo))
        described["memo"] = memo
        return described

    def list_executions(self, query: str = "", *, limit: int = 1000) -> List[Dict[str, Any]]:
        """Executions (their latest run each) matching ``query`` in the list query language
        (docs/queries.md), newest first unless it says ``ORDER BY created ASC``, following
        the pages up to ``limit``: ``ExecutionInfo`` dicts with the proto's JSON field names
        (``executionId``, ``workflow``, ``status`` e.g. ``"EXECUTION_STATUS_FAILED"``, ...).
        A query that does not parse or type-check raises ``INVALID_QUERY``; the error's
        details carry ``position``, ``line`` and ``column``."""
        executions: List[Dict[str, Any]] = []
        token = ""
        while len(executions) < limit:
            request = workflow_pb2.ListExecutionsRequest(
                query=query, page_size=min(1000, limit - len(executions)), page_token=token
            )
            r = self._call(
                lambda ch: self._workflows(ch).ListExecutions(request, metadata=self._metadata, timeout=self.timeout)
            )
            executions.extend(json_format.MessageToDict(e) for e in r.executions)
            if not r.next_page_token:
                break
            token = r.next_page_token
        return executions[:limit]

    def count_executions(self, query: str = "", group_by: Sequence[str] = ()) -> Dict[str, Any]:
        """How many executions ``query`` (the list query language, docs/queries.md; empty
        counts all) matches: ``{"count": n, "groups": [{"values": [...], "count": n},
        ...]}``, the groups (with ``group_by``, at most 3 of ``workflow``, ``version``,
        ``status``, ``schedule``, ``parent``, ``root``) largest first, each value in
        ``group_by``'s order (an absent value is ``""``). A restricted identity counts only
        the workflows it may read. A bad query raises ``INVALID_QUERY``; an attribute that
        cannot be grouped by, ``INVALID_ARGUMENT``."""
        request = workflow_pb2.CountExecutionsRequest(query=query, group_by=list(group_by))
        r = self._call(
            lambda ch: self._workflows(ch).CountExecutions(request, metadata=self._metadata, timeout=self.timeout)
        )
        return {
            "count": r.count,
            "groups": [{"values": list(g.values), "count": g.count} for g in r.groups],
        }

    def search_attribute_catalog(self) -> List[Dict[str, Any]]:
        """Every attribute a list query may name (all pages): the system attributes, then the
        declared search attributes by name (those of workflows a restricted identity may
        read), each ``{"name", "type", "system", "workflow"}``."""
        out: List[Dict[str, Any]] = []
        token = ""
        while True:
            request = workflow_pb2.ListSearchAttributesRequest(page_size=1000, page_token=token)
            page = self._call(
                lambda ch: self._workflows(ch).ListSearchAttributes(request, metadata=self._metadata, timeout=self.timeout)
            )
            out.extend(
                {"name": a.name, "type": a.type, "system": a.system, "workflow": a.workflow}
                for a in page.attributes
            )
            if not page.next_page_token:
                return out
            token = page.next_page_token

    def history(self, execution_id: str) -> List[Event]:
        """Every event of the latest run, oldest first (all pages)."""
        events: List[Event] = []
        token = ""
        while True:
            request = workflow_pb2.GetHistoryRequest(execution_id=execution_id, page_token=token)
            page = self._call(
                lambda ch: self._workflows(ch).GetHistory(request, metadata=self._metadata, timeout=self.timeout)
            )
            events.extend(_event(e) for e in page.events)
            if not page.next_page_token:
                return events
            token = page.next_page_token

    def watch(self, execution_id: str, *, after_seq: int = 0, timeout: Optional[float] = None) -> Iterator[Any]:
        """Follows the execution: yields each :class:`Event` as it is recorded, then the
        :class:`ExecutionResult` last. ``timeout`` bounds the whole watch (None: none)."""
        request = workflow_pb2.WatchExecutionRequest(execution_id=execution_id, after_seq=after_seq)
        stream = self._workflows(self._channel(self._current)).WatchExecution(
            request, metadata=self._metadata, timeout=timeout
        )
        for message in stream:
            kind = message.WhichOneof("kind")
            if kind == "event":
                yield _event(message.event)
            elif kind == "result":
                yield _result(message.result)
                return

    def result(self, execution_id: str, timeout: Optional[float] = None) -> ExecutionResult:
        """Waits for the execution to end and returns how it ended."""
        request = workflow_pb2.WatchExecutionRequest(execution_id=execution_id, result_only=True)

        def wait(ch: grpc.Channel) -> ExecutionResult:
            for message in self._workflows(ch).WatchExecution(request, metadata=self._metadata, timeout=timeout):
                if message.WhichOneof("kind") == "result":
                    return _result(message.result)
            raise RuntimeError(f"the watch of {execution_id} ended without a result")

        return self._call(wait)

    def list_workers(self, online_only: bool = False) -> List[Dict[str, Any]]:
        """``AdminService.ListWorkers``: each worker's id, ``sdk``, ``runtime``, tasks,
        sessions (dicts with the proto's JSON field names)."""
        request = admin_pb2.ListWorkersRequest(online_only=online_only)
        response = self._call(
            lambda ch: admin_pb2_grpc.AdminServiceStub(ch).ListWorkers(
                request, metadata=self._metadata, timeout=self.timeout
            )
        )
        return [json_format.MessageToDict(w) for w in response.workers]

    def set_rate_limit(self, name: str, limit: int, period: Union[float, datetime.timedelta]) -> Dict[str, Any]:
        """``AdminService.SetRateLimit``: creates or replaces the server-wide named rate limit
        ``name``, which allows at most ``limit`` task starts per window of ``period`` (seconds,
        or a ``timedelta``; 1 ms to 366 days), per bucket (the name, or the name and a step's
        evaluated ``key:``). Windows are aligned to the Unix epoch. Steps take from it with
        ``rate_limit: {name: ...}``; a change takes effect at each frontend's next claim.
        Returns the limit as stored: ``{"name", "limit", "period_seconds", "updated_at"}``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"set_rate_limit: limit must be a whole number of at least 1, not {limit!r}")
        rate_limit = admin_pb2.RateLimit(name=name, limit=limit)
        rate_limit.period.FromTimedelta(_period(period))
        request = admin_pb2.SetRateLimitRequest(rate_limit=rate_limit)
        response = self._call(
            lambda ch: self._admin(ch).SetRateLimit(request, metadata=self._metadata, timeout=self.timeout)
        )
        return _rate_limit(response.rate_limit)

    def list_rate_limits(self) -> List[Dict[str, Any]]:
        """``AdminService.ListRateLimits``: every named rate limit, ordered by name (as
        :meth:`set_rate_limit` returns them)."""
        out: List[Dict[str, Any]] = []
        token = ""
        while True:
            request = admin_pb2.ListRateLimitsRequest(page_size=1000, page_token=token)
            response = self._call(
                lambda ch: self._admin(ch).ListRateLimits(request, metadata=self._metadata, timeout=self.timeout)
            )
            out.extend(_rate_limit(r) for r in response.rate_limits)
            token = response.next_page_token
            if not token:
                return out

    def delete_rate_limit(self, name: str) -> None:
        """``AdminService.DeleteRateLimit``: attempts of steps that reference the limit stay
        queued until it is set again. An unknown name raises with ``RATE_LIMIT_NOT_FOUND``."""
        request = admin_pb2.DeleteRateLimitRequest(name=name)
        self._call(lambda ch: self._admin(ch).DeleteRateLimit(request, metadata=self._metadata, timeout=self.timeout))


def _batch(b: Any) -> Dict[str, Any]:
    """A ``Batch`` message as a dict (see ``Client.describe_batch``)."""
    return {
        "batch_id": b.batch_id,
        "state": workflow_pb2.BatchState.Name(b.state).removeprefix("BATCH_STATE_"),
        "workflow": b.selector.workflow,
        "version": b.selector.version,
        "to_version": b.action.migrate.to_version,
        "query": b.selector.query,
        "action": b.action.WhichOneof("action") or "",
        "total": b.total,
        "done": b.done,
        "succeeded": b.succeeded,
        "failed": b.failed,
        "skipped": b.skipped,
        "cursor": b.cursor,
        "reason": b.reason,
        "rate_per_second": b.rate_per_second,
    }
