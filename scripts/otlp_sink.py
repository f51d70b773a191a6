#!/usr/bin/env python3
"""A minimal OTLP/gRPC trace sink: accepts `TraceService/Export` and counts the spans.

For measuring the cost of exporting traces without a collector (docs/benchmarks.md):

    python3 scripts/otlp_sink.py --port 4317 &
    orbit bench --otlp-endpoint http://127.0.0.1:4317

Prints the number of spans received when stopped (SIGINT/SIGTERM). Needs grpcio and
opentelemetry-proto: the Python SDK with its `otel` extra provides both
(`pip install 'sdks/python[otel]'`, as scripts/test.sh does into target/py-venv).
"""

import argparse
import signal
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans = 0
        self.lock = threading.Lock()

    def Export(self, request, context):  # noqa: N802 - the gRPC method name
        n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        with self.lock:
            self.spans += n
        return trace_service_pb2.ExportTraceServiceResponse()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4317)
    args = parser.parse_args()
    sink = Sink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(1)
    print(f"otlp_sink: {sink.spans} spans received", file=sys.stderr)


if __name__ == "__main__":
    main()
