"""Command-line plumbing shared by the example and conformance workers: the common flags,
and a runner that maps a refusal and unusable options to exit codes with one clear line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any, Callable, Dict, List, Optional

from . import tracing
from .context import TaskContext
from .errors import WorkerRejected
from .worker import Worker

log = logging.getLogger("orbit_worker")

#: Exit code of the example workers when the server refuses them (the CLI's "server" code).
EXIT_REFUSED = 4
#: Exit code of the example workers for unusable options (the CLI's "usage" code).
EXIT_USAGE = 2


def refusal_line(error: BaseException) -> str:
    """The one line a worker prints when the server refuses it."""
    return f"orbit worker: refused by the server: {error}"


def parse_common_args(description: str, argv: Optional[List[str]] = None) -> argparse.Namespace:
    """``--address``, ``--max-tasks``, ``--max-concurrency``, ``--worker-id``, ``--token``,
    ``--tls-ca``, ``--tls-client-cert``, ``--tls-client-key`` and ``--log-level`` for the
    example workers. The token and TLS flags default to their ``ORBIT_*`` variables (read
    by :class:`Worker` when a flag is not given)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--address",
        default="127.0.0.1:7233",
        help="frontend host:port (TLS with --tls-ca) or http(s):// URL; several comma-separated",
    )
    parser.add_argument(
        "--max-tasks", type=int, default=0, help="exit after this many tasks (0: run until a signal)"
    )
    parser.add_argument("--max-concurrency", type=int, default=10)
    parser.add_argument("--worker-id", default=None)
    parser.add_argument(
        "--token", default=None, help="bearer token sent on the session (default: $ORBIT_TOKEN)"
    )
    parser.add_argument(
        "--tls-ca",
        default=None,
        metavar="PEM",
        help="CA that signed the frontend's certificate: connect with TLS (default: $ORBIT_TLS_CA)",
    )
    parser.add_argument(
        "--tls-client-cert",
        default=None,
        metavar="PEM",
        help="client certificate for mutual TLS; needs --tls-client-key (default: $ORBIT_TLS_CLIENT_CERT)",
    )
    parser.add_argument(
        "--tls-client-key",
        default=None,
        metavar="PEM",
        help="key of --tls-client-cert (default: $ORBIT_TLS_CLIENT_KEY)",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args


def run_example(worker_factory: Callable[..., Worker], args: Any) -> None:
    """Runs an example worker until a signal, or until ``args.max_tasks`` tasks finished
    (then drains, so their results are acknowledged before exiting). Unusable options exit
    with :data:`EXIT_USAGE`, a refusal by the server (``WorkerRejected``) with
    :data:`EXIT_REFUSED`, each after one line on stderr."""
    shutdown_holder: Dict[str, asyncio.Event] = {}
    done = [0]

    def on_task_done(ctx: TaskContext, ok: bool) -> None:
        done[0] += 1
        log.info("%s %s (%s) %s", ctx.task, ctx.step, ctx.execution_id, "completed" if ok else "failed")
        if args.max_tasks and done[0] >= args.max_tasks:
            shutdown_holder["event"].set()

    try:
        worker = worker_factory(
            address=args.address,
            worker_id=args.worker_id,
            max_concurrency=args.max_concurrency,
            bearer_token=args.token,
            tls_ca=args.tls_ca,
            tls_client_cert=args.tls_client_cert,
            tls_client_key=args.tls_client_key,
            on_task_done=on_task_done,
        )
    except (ValueError, OSError) as e:
        print(f"orbit worker: {e}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None

    tracer_provider = tracing.setup_from_env("orbit-python-worker")

    async def main() -> None:
        shutdown_holder["event"] = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, shutdown_holder["event"].set)
            except (NotImplementedError, RuntimeError):  # pragma: no cover
                pass
        await worker.run(shutdown_holder["event"])

    try:
        asyncio.run(main())
    except WorkerRejected as e:
        # Not retried (see the module doc): say why once and stop.
        print(refusal_line(e), file=sys.stderr)
        raise SystemExit(EXIT_REFUSED) from None
    finally:
        tracing.shutdown(tracer_provider)  # exports the last task spans
