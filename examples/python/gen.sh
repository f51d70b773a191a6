#!/usr/bin/env sh
# Generates the Python gRPC client for Orbit's API from ../../proto into ./gen (gitignored).
#
#   pip install -r requirements.txt && ./gen.sh
#
# Well-known types (google/protobuf/*.proto) come from grpc_tools' bundled include path;
# their Python modules ship with the protobuf runtime, so only Orbit's files are generated.
set -eu

here="$(cd "$(dirname "$0")" && pwd)"
proto_root="$(cd "$here/../../proto" && pwd)"
out="$here/gen"
python="${PYTHON:-python3}"

wkt_include="$("$python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"

rm -rf "$out"
mkdir -p "$out"

# Every .proto under proto/, named relative to the include root (orbit/v1/worker.proto).
files="$(cd "$proto_root" && find . -name '*.proto' | sed 's|^\./||' | sort)"

# shellcheck disable=SC2086 # word splitting of $files is intended (paths have no spaces)
"$python" -m grpc_tools.protoc \
  -I "$proto_root" \
  -I "$wkt_include" \
  --python_out="$out" \
  --pyi_out="$out" \
  --grpc_python_out="$out" \
  $files

# Make the generated tree importable as packages (orbit.v1.worker_pb2 and friends).
find "$out" -mindepth 1 -type d -exec touch {}/__init__.py \;

echo "generated $(echo "$files" | wc -l | tr -d ' ') proto files into $out"
