"""Where and how to connect: addresses, TLS / mutual TLS and the bearer token.

The same options as the ``orbit`` CLI and the Rust worker (docs/security.md, "Clients"),
each read from its variable when not given (an empty value means "none"): ``ORBIT_TLS_CA``
(dial TLS, verify the server), ``ORBIT_TLS_CLIENT_CERT`` + ``ORBIT_TLS_CLIENT_KEY``
(mutual TLS) and ``ORBIT_TOKEN`` (``authorization: Bearer <token>`` metadata).

With a CA, an address without a scheme is dialled with TLS (``https://``); ``https://``
without a CA, TLS options with an explicit ``http://`` address, or a client certificate
without its key are refused (``ValueError``), as by the Rust client. The PEM files are read
at every (re)connect, so a renewed certificate is picked up without a restart.
"""

from __future__ import annotations

import os
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

#: One address or several (the worker and the client move to the next when one fails).
Addresses = Union[str, Sequence[str]]


class ConnectionOptions:
    """The resolved connection settings: the gRPC ``target`` (``host:port``), whether TLS
    is on, the PEM file paths, and the call metadata (the bearer token, if any)."""

    def __init__(
        self,
        target: str,
        tls: bool,
        ca: Optional[str],
        cert: Optional[str],
        key: Optional[str],
        metadata: Tuple[Tuple[str, str], ...],
    ) -> None:
        self.target = target
        self.tls = tls
        self.ca = ca
        self.cert = cert
        self.key = key
        self.metadata = metadata

    def credentials(self) -> "grpc.ChannelCredentials":
        """The channel credentials, reading the PEM files now (``OSError`` if unreadable)."""

        def read(path: Optional[str]) -> Optional[bytes]:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca),
            private_key=read(self.key),
            certificate_chain=read(self.cert),
        )

    def channel(self, options: List[Tuple[str, Any]]) -> "grpc.aio.Channel":
        """A new channel: ``secure_channel`` with TLS, else ``insecure_channel``."""
        if self.tls:
            return grpc.aio.secure_channel(self.target, self.credentials(), options=options)
        return grpc.aio.insecure_channel(self.target, options=options)


def _from_env(value: Optional[str], variable: str, environ: Mapping[str, str]) -> Optional[str]:
    """``value`` if given, else the variable; empty (either way) means none."""
    if value is None:
        value = environ.get(variable)
    return value or None


def connection_options(
    address: str,
    tls_ca: Optional[str] = None,
    tls_client_cert: Optional[str] = None,
    tls_client_key: Optional[str] = None,
    bearer_token: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> ConnectionOptions:
    """Resolves the options the way the Rust clients do (``orbit_api::tls::ClientTls``):
    each option not given (None) comes from ``ORBIT_TLS_CA``, ``ORBIT_TLS_CLIENT_CERT``,
    ``ORBIT_TLS_CLIENT_KEY`` or ``ORBIT_TOKEN``; TLS is on with a CA or an ``https://``
    address. Raises ``ValueError`` for inconsistent options."""
    env = os.environ if environ is None else environ
    ca = _from_env(tls_ca, "ORBIT_TLS_CA", env)
    cert = _from_env(tls_client_cert, "ORBIT_TLS_CLIENT_CERT", env)
    key = _from_env(tls_client_key, "ORBIT_TLS_CLIENT_KEY", env)
    token = _from_env(bearer_token, "ORBIT_TOKEN", env)

    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = ("https" if ca else "http"), address
    if scheme not in ("http", "https"):
        raise ValueError(f"address `{address}`: the scheme must be http:// or https://")
    target = rest.rstrip("/")
    if not target or "/" in target:
        raise ValueError(f"address `{address}` is not host:port")
    tls = scheme == "https"
    if not tls and (ca or cert or key):
        raise ValueError(f"TLS options given but the address `{address}` is http://")
    if tls and not ca:
        raise ValueError(f"an https address needs a TLS CA (--tls-ca or ORBIT_TLS_CA): `{address}`")
    if (cert is None) != (key is None):
        raise ValueError("a TLS client certificate needs its key, and the reverse")

    metadata: Tuple[Tuple[str, str], ...] = ()
    if token is not None:
        # gRPC metadata values are printable ASCII; a pasted token with a newline or a
        # space would otherwise fail at the first call with an obscure error.
        if not all(0x21 <= ord(ch) <= 0x7E for ch in token):
            raise ValueError("the bearer token must be printable ASCII without spaces")
        metadata = (("authorization", f"Bearer {token}"),)
    return ConnectionOptions(target, tls, ca, cert, key, metadata)


def split_addresses(addresses: Addresses) -> List[str]:
    """A list of addresses from a list or a comma-separated string; at least one."""
    if isinstance(addresses, str):
        items = addresses.split(",")
    else:
        items = list(addresses)
    out = [a.strip() for a in items if a and a.strip()]
    if not out:
        raise ValueError("at least one frontend address is needed")
    return out


def connection_list(
    addresses: Addresses,
    tls_ca: Optional[str] = None,
    tls_client_cert: Optional[str] = None,
    tls_client_key: Optional[str] = None,
    bearer_token: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> List[ConnectionOptions]:
    """:func:`connection_options` for every address (the same TLS and token for all);
    the PEM files are read once here so a missing file fails at construction."""
    out = [
        connection_options(a, tls_ca, tls_client_cert, tls_client_key, bearer_token, environ)
        for a in split_addresses(addresses)
    ]
    for options in out:
        if options.tls:
            options.credentials()
    return out
