"""The gRPC client generated from the repository's ``proto/`` at build time (setup.py).

Imported from here so that a package built without its generated client fails with one
clear message instead of an obscure ``ModuleNotFoundError`` deep inside the SDK.
"""

try:
    from orbit_worker._gen.orbit.v1 import (  # noqa: F401
        admin_pb2,
        admin_pb2_grpc,
        common_pb2,
        worker_pb2,
        worker_pb2_grpc,
        workflow_pb2,
        workflow_pb2_grpc,
    )
except ImportError as e:  # pragma: no cover - a packaging error
    raise ImportError(
        f"orbit_worker was installed without its generated gRPC client ({e}); "
        "reinstall it from the Orbit repository: `pip install sdks/python`"
    ) from e
