"""The worker's result messages, checked against the server's payload limits: a result
the server would refuse is reported as a ``Fail`` with the payload code instead, so the
execution goes on rather than retrying or hanging."""

from __future__ import annotations

from typing import Any

from ._proto import common_pb2, worker_pb2
from .errors import UNHANDLED_EXCEPTION
from .values import Json, payload_violation, to_proto_value


def fail_message(token: str, code: str, message: str, retryable: bool, details: Json = None) -> Any:
    """``WorkerMessage{fail: {token, error}}``."""
    code = code or UNHANDLED_EXCEPTION
    violation = None if details is None else payload_violation(details, "details")
    if violation is not None:
        # The details cannot be sent: report the attempt failed with the payload code.
        return fail_message(token, violation[0], f"{violation[1]} (the task failed with {code})", False)
    error = common_pb2.TaskError(code=code, message=message, retryable=retryable)
    if details is not None:
        error.details.CopyFrom(to_proto_value(details))
    return worker_pb2.WorkerMessage(fail=worker_pb2.WorkerMessage.Fail(token=token, error=error))


def complete_message(token: str, output: Json) -> Any:
    """``WorkerMessage{complete: {token, output}}`` (or a payload ``Fail``)."""
    violation = None if output is None else payload_violation(output, "output")
    if violation is not None:
        return fail_message(token, violation[0], violation[1], False)
    complete = worker_pb2.WorkerMessage.Complete(token=token)
    if output is not None:
        complete.output.CopyFrom(to_proto_value(output))
    return worker_pb2.WorkerMessage(complete=complete)
