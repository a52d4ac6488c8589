"""Which address a socket may listen on: never every address of the machine (`is_wildcard`), however
the address is spelled."""

from __future__ import annotations

import contextlib
import ipaddress
import socket


def is_wildcard(host: str) -> bool:
    """Whether binding ``host`` listens on every address of the machine: empty, or an address (in any
    spelling the system takes: ``0``, ``000.000.000.000``, ``0x0``, ``::``, ``::ffff:0.0.0.0``) or a
    name that stands for the unspecified address."""
    if not host.strip():
        return True
    found: list[str] = []
    with contextlib.suppress(OSError):
        found.append(socket.inet_ntoa(socket.inet_aton(host)))  # the forms inet_aton takes (0, 0x0 ...)
    with contextlib.suppress(OSError, UnicodeError, ValueError):
        found += [info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)]
    for text in found or [host]:
        try:
            address = ipaddress.ip_address(text.partition("%")[0])
        except ValueError:
            continue
        mapped = getattr(address, "ipv4_mapped", None)
        if address.is_unspecified or (mapped is not None and mapped.is_unspecified):
            return True
    return False
