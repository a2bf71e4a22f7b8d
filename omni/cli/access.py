"""Who may reach `omni serve` and what its image URLs may name, from its flags: a keyless
server is refused on any address but the loopback unless asked for on purpose."""

from __future__ import annotations

import argparse
import errno
import ipaddress
import socket
from typing import TYPE_CHECKING

from omni.api.keys import KeyRing, api_key, read_key_file
from omni.cli.options import flat
from omni.errors import OmniError

if TYPE_CHECKING:
    from omni.api.gate import Access
    from omni.image_hosts import ImageHosts


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def access(args: argparse.Namespace) -> Access:
    """The gate's settings from the flags; refuses to expose a keyless server by accident."""
    from omni.api.gate import Access

    keys = [api_key(k.strip()) for k in args.api_key if k.strip()]
    if args.api_key_file:
        keys += read_key_file(args.api_key_file)
    ring = KeyRing(keys)
    if not ring and not is_loopback(args.host) and not args.allow_no_auth:
        raise OmniError(
            f"refusing to serve {args.host} without an API key: anyone who can reach it could "
            "use it. Set --api-key / --api-key-file (or OMNI_API_KEY), or pass --allow-no-auth "
            "to serve it open on purpose."
        )
    return Access(
        keys=ring,
        allowed_origins=flat(args.allowed_origins),
        allowed_hosts=flat(args.allowed_hosts),
        max_body_bytes=int(args.max_body_mb * 1024 * 1024),
        host=args.host,
    )


def image_hosts(args: argparse.Namespace) -> ImageHosts:
    """What image URLs may name beyond public addresses (--allow-image-hosts)."""
    from omni.image_hosts import ImageHosts

    try:
        return ImageHosts.parse(flat(args.allow_image_hosts))
    except ValueError as exc:
        raise OmniError(f"--allow-image-hosts: {exc}") from None


def check_port(host: str, port: int) -> None:
    """A port another process listens on stops the start in one line, before the log."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OmniError(f"port {port} on {host} is already in use") from None
            raise OmniError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
