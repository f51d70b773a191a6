"""Build step of ``orbit-worker``: generates the gRPC client from the repository's
``proto/`` with grpcio-tools before the package is collected.

The generated modules go to ``src/orbit_worker/_gen/orbit/v1/`` and import each other as
``orbit_worker._gen.orbit.v1.*`` (rewritten below), so the package never puts a top-level
``orbit`` package on ``sys.path`` that could clash with another copy of the same protos.
pip builds a local directory in place, so ``../../proto`` is reachable; a build from an
sdist or a copied directory without it fails with a clear message instead of installing a
package without its client.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.command.develop import develop

HERE = Path(__file__).resolve().parent
GEN = HERE / "src" / "orbit_worker" / "_gen"
_IMPORT = re.compile(r"^from orbit\.(\S+) import ", re.MULTILINE)


def _proto_root() -> Path:
    root = Path(os.environ.get("ORBIT_PROTO_DIR", HERE / ".." / ".." / "proto")).resolve()
    if not (root / "orbit" / "v1" / "worker.proto").is_file():
        sys.exit(
            f"orbit-worker: the protobuf sources are not at {root} (expected "
            "orbit/v1/worker.proto there). Build from the Orbit repository "
            "(`pip install sdks/python`) or set ORBIT_PROTO_DIR to its proto/ directory."
        )
    return root


def generate() -> None:
    """Runs protoc (grpcio-tools) over every ``.proto`` under the proto root."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        sys.exit("orbit-worker: building needs grpcio-tools (declared in pyproject.toml)")
    root = _proto_root()
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.proto"))
    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    if GEN.exists():
        shutil.rmtree(GEN)
    GEN.mkdir(parents=True)
    args = ["protoc", f"-I{root}", f"-I{wkt}", f"--python_out={GEN}", f"--pyi_out={GEN}",
            f"--grpc_python_out={GEN}", *files]
    if protoc.main(args) != 0:
        sys.exit(f"orbit-worker: protoc failed on {root}")
    for path in GEN.rglob("*"):
        if path.is_dir():
            (path / "__init__.py").touch()
        elif path.suffix in (".py", ".pyi"):
            text = path.read_text(encoding="utf-8")
            path.write_text(_IMPORT.sub(r"from orbit_worker._gen.orbit.\1 import ", text), encoding="utf-8")
    (GEN / "__init__.py").write_text('"""Generated from proto/ at build time (setup.py)."""\n')
    print(f"orbit-worker: generated {len(files)} proto files into {GEN}")


class GenerateProto(Command):
    """``python setup.py generate_proto``: only the generation step."""

    description = "generate the gRPC client from proto/"
    user_options: list = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        generate()


class BuildPy(build_py):
    def run(self) -> None:
        generate()
        super().run()


class Develop(develop):
    def run(self) -> None:
        generate()
        super().run()


setup(cmdclass={"build_py": BuildPy, "develop": Develop, "generate_proto": GenerateProto})
