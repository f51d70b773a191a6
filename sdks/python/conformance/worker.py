#!/usr/bin/env python3
"""The Python SDK's conformance worker (the contract: sdks/conformance/README.md).

Configured by the environment only: ``ORBIT_ADDRESSES`` (comma-separated frontends),
``ORBIT_TOKEN``, ``ORBIT_TLS_CA``, ``ORBIT_WORKER_ID``, ``ORBIT_MAX_CONCURRENCY`` (default
8) and ``CONFORMANCE_DIR``. Prints ``READY`` after the first ``Welcome``, drains and exits 0
on SIGTERM, and exits non-zero with the server's status code on stderr when refused.

Run from the repository root with the package installed::

    ORBIT_ADDRESSES=127.0.0.1:7233 CONFORMANCE_DIR=/tmp/c python3 sdks/python/conformance/worker.py
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Dict

from orbit_worker import (
    CANCELLED,
    EXIT_REFUSED,
    NonRetryableError,
    RetryableError,
    TaskContext,
    TaskFailure,
    Worker,
    WorkerRejected,
    refusal_line,
)

log = logging.getLogger("conformance")


def _input(ctx: TaskContext) -> Dict[str, Any]:
    return ctx.input if isinstance(ctx.input, dict) else {}


def build(worker: Worker, marker_dir: Path) -> None:
    """Registers every task of the contract on ``worker``."""

    @worker.task("greet", "1")
    def greet(ctx: TaskContext) -> Dict[str, Any]:
        return {"greeting": f"Hello, {_input(ctx).get('name')}!"}

    @worker.task("payments.charge", "1")
    def charge(ctx: TaskContext) -> Dict[str, Any]:
        data = _input(ctx)
        if data.get("amount") == 13:
            raise NonRetryableError("CARD_DECLINED", f"card declined for order {data.get('order_id')}")
        if data.get("amount") == 120:  # the on-failure example's declined card
            raise NonRetryableError("DECLINED", "card declined")
        return {"charge_id": f"ch-{data.get('order_id')}"}

    @worker.task("payments.refund", "1")
    def refund(ctx: TaskContext) -> Dict[str, Any]:
        return {}

    @worker.task("inventory.reserve", "1")
    def reserve(ctx: TaskContext) -> Dict[str, Any]:
        data = _input(ctx)
        sku = data.get("sku")
        if sku is None:  # the on-failure example reserves by order
            return {"reservation": f"r-{data.get('order_id')}"}
        if sku == "none":
            raise NonRetryableError("OUT_OF_STOCK", "sku `none` is never in stock")
        return {"reservation": f"r-{sku}"}

    @worker.task("inventory.release", "1")
    def release(ctx: TaskContext) -> Dict[str, Any]:
        return {}

    @worker.task("conformance.flaky", "1")  # sync: the thread-pool path
    def flaky(ctx: TaskContext) -> Dict[str, Any]:
        if ctx.attempt <= int(_input(ctx).get("fail_times", 0)):
            raise RetryableError("FLAKY", f"attempt {ctx.attempt}")
        return {"attempt": ctx.attempt, "idempotency_key": ctx.idempotency_key}

    @worker.task("conformance.heartbeat", "1")  # sync: observes the cancellation itself
    def heartbeat(ctx: TaskContext) -> Dict[str, Any]:
        beats = 0
        while not ctx.cancelled:
            beats += 1
            ctx.heartbeat({"beats": beats})
            ctx.wait(0.1)
        raise TaskFailure(CANCELLED, f"cancelled after {beats} beats: {ctx.cancel_reason}", retryable=False)

    @worker.task("conformance.slow", "1")  # async: the event-loop path
    async def slow(ctx: TaskContext) -> Dict[str, Any]:
        stem = marker_dir / f"{ctx.idempotency_key}.{ctx.attempt}"
        Path(f"{stem}.started").touch()
        await asyncio.sleep(int(_input(ctx).get("ms", 0)) / 1000)
        Path(f"{stem}.done").touch()
        return {"attempt": ctx.attempt, "idempotency_key": ctx.idempotency_key, "worker_id": worker.worker_id}

    @worker.task("bench.step", "1")
    async def bench_step(ctx: TaskContext) -> Any:
        return ctx.input

    build_language(worker)


def _prefixed(key: str, prefix: str, field: str) -> Callable[[TaskContext], Dict[str, Any]]:
    """A task answering ``{key: "<prefix><input[field]>"}``."""

    def handler(ctx: TaskContext) -> Dict[str, Any]:
        return {key: f"{prefix}{_input(ctx).get(field)}"}

    return handler


def _constant(value: Dict[str, Any]) -> Callable[[TaskContext], Dict[str, Any]]:
    """A task answering ``value`` whatever its input."""

    def handler(ctx: TaskContext) -> Dict[str, Any]:
        return dict(value)

    return handler


def build_language(worker: Worker) -> None:
    """Registers the tasks of the language examples (groups, switch, continue-on-failure,
    on-failure, race, loops) that the contract's first tasks do not cover."""

    @worker.task("notify.email", "1")
    def email(ctx: TaskContext) -> Dict[str, Any]:
        # A notice with a reason (on-failure) is sent; otherwise the mail is down.
        if _input(ctx).get("reason") is None:
            raise RetryableError("SMTP_DOWN", "mail is down")
        return {"sent": True}

    @worker.task("notify.sms", "1")
    def sms(ctx: TaskContext) -> Dict[str, Any]:
        phone = _input(ctx).get("phone")
        if phone == "+0":
            raise NonRetryableError("BAD_NUMBER", "no such number")
        return {"sent": phone}

    @worker.task("warehouse.ship", "1")
    def ship(ctx: TaskContext) -> Dict[str, Any]:
        charge = _input(ctx).get("charge_id")
        if charge == "ch-o-fail":
            raise RetryableError("NO_CARRIER", "no carrier today")
        return {"tracking": f"T-{charge}"}

    @worker.task("jobs.status", "1")
    async def job_status(ctx: TaskContext) -> Dict[str, Any]:
        return {"state": "done" if _input(ctx).get("attempt", 0) >= 2 else "running"}

    simple = {
        "warehouse.pack": _prefixed("box", "box-", "sku"),
        "warehouse.unpack": _constant({}),
        "warehouse.label": _prefixed("label", "L-", "order_id"),
        "carrier.send": _prefixed("tracking", "T-", "label"),
        "refunds.review": _constant({"reviewer": "ops"}),
        "billing.invoice": _prefixed("invoice", "inv-", "order_id"),
        "approvals.request": _prefixed("ticket", "t-", "request_id"),
        "approvals.escalate": _constant({"to": "manager"}),
    }
    for name, handler in simple.items():
        worker.register(name, "1", handler)


def main() -> int:
    logging.basicConfig(level=os.environ.get("CONFORMANCE_LOG", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    marker_dir = Path(os.environ.get("CONFORMANCE_DIR") or ".")
    worker = Worker(
        os.environ.get("ORBIT_ADDRESSES", "127.0.0.1:7233"),
        worker_id=os.environ.get("ORBIT_WORKER_ID") or None,
        max_concurrency=int(os.environ.get("ORBIT_MAX_CONCURRENCY") or 8),
        # Reconnect quickly: the runner restarts `orbit dev` and waits for the worker.
        backoff_initial=0.1,
        backoff_max=1.0,
        on_ready=lambda: print("READY", flush=True),
    )
    build(worker, marker_dir)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await worker.run(stop)

    try:
        asyncio.run(run())
    except WorkerRejected as e:
        print(refusal_line(e), file=sys.stderr, flush=True)
        return EXIT_REFUSED
    log.info("drained; exiting")
    return 0


if __name__ == "__main__":
    sys.exit(main())
