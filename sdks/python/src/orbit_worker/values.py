"""JSON values on the wire (``google.protobuf.Value``) and the server's payload limits."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Optional, Tuple

from google.protobuf import struct_pb2

Json = Any
_MAX_SAFE_INTEGER = 2**53

# Payload limits, the server's (orbit_payload in the Rust tree; docs/events.md, "Payload
# limits"): a result nested deeper than MAX_DEPTH, or larger than MAX_PAYLOAD_BYTES as JSON
# or as protobuf, is refused by the server (or does not even decode there), so it is
# reported as a Fail with the payload code instead and the execution goes on.
MAX_DEPTH = 24
MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
PAYLOAD_TOO_DEEP = "PAYLOAD_TOO_DEEP"



def to_proto_value(obj: Json) -> struct_pb2.Value:
    """A JSON-like Python value (None, bool, int, float, str, list/tuple, dict) as a
    ``google.protobuf.Value``. Numbers become doubles."""
    v = struct_pb2.Value()
    if obj is None:
        v.null_value = struct_pb2.NULL_VALUE
    elif isinstance(obj, bool):  # before int: bool is an int subclass
        v.bool_value = obj
    elif isinstance(obj, (int, float)):
        v.number_value = float(obj)
    elif isinstance(obj, str):
        v.string_value = obj
    elif isinstance(obj, Mapping):
        v.struct_value.SetInParent()
        for key, item in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"object keys must be strings, got {key!r}")
            v.struct_value.fields[key].CopyFrom(to_proto_value(item))
    elif isinstance(obj, (list, tuple)):
        v.list_value.SetInParent()
        for item in obj:
            v.list_value.values.add().CopyFrom(to_proto_value(item))
    else:
        raise TypeError(f"not a JSON value: {type(obj).__name__}")
    return v


def from_proto_value(v: Optional[struct_pb2.Value]) -> Json:
    """A ``google.protobuf.Value`` as a Python JSON value. Unset reads as None; a whole
    number within +-2^53 becomes an int; NaN and infinities become None."""
    if v is None:
        return None
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "bool_value":
        return v.bool_value
    if kind == "number_value":
        n = v.number_value
        if not math.isfinite(n):
            return None
        if n.is_integer() and abs(n) <= _MAX_SAFE_INTEGER:
            return int(n)
        return n
    if kind == "string_value":
        return v.string_value
    if kind == "struct_value":
        return {k: from_proto_value(item) for k, item in v.struct_value.fields.items()}
    if kind == "list_value":
        return [from_proto_value(item) for item in v.list_value.values]
    raise ValueError(f"unknown google.protobuf.Value kind {kind!r}")


def payload_depth(obj: Json) -> int:
    """Nesting depth of lists and dicts (a scalar is 0), walked without recursion."""
    depth = 0
    stack = [(obj, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, Mapping):
            children = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        depth = max(depth, level + 1)
        if depth > MAX_DEPTH:
            return depth  # deep enough to refuse; no need to walk a hostile value further
        stack.extend((child, level + 1) for child in children)
    return depth


def payload_violation(obj: Json, what: str) -> Optional[Tuple[str, str]]:
    """``(code, message)`` when ``obj`` is over the payload limits, else None."""
    depth = payload_depth(obj)
    if depth > MAX_DEPTH:
        return PAYLOAD_TOO_DEEP, f"{what} is nested more than {MAX_DEPTH} levels deep"
    size = to_proto_value(obj).ByteSize()
    try:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size = max(size, len(text.encode("utf-8")))
    except (TypeError, ValueError):
        pass  # not JSON text (NaN, odd keys): the protobuf size still applies
    if size > MAX_PAYLOAD_BYTES:
        return PAYLOAD_TOO_LARGE, f"{what} is {size} bytes (max_payload_bytes {MAX_PAYLOAD_BYTES})"
    return None
