"""Image URLs fetched without letting a client reach the server's own network. Every address a
URL's host resolves to must be public, or allowed by the operator (--allow-image-hosts), at
each redirect hop; the connection goes to an address that was checked, with no second lookup
in between (DNS rebinding), under the URL's own Host header and, for https, its own name
(SNI, and the certificate must be that name's). A fetch has one deadline for all its hops,
connects and reads, so that a slow server holds a fetching thread no longer. Why a fetch gave
no image is for the log: vision_inputs.py answers every failure with one message, else a client
could scan ports with it."""

from __future__ import annotations

import functools
import http.client
import io
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from omni.image_hosts import ImageHosts
from omni.settings import ServerSettings

MAX_IMAGE_BYTES = 20 * 1024 * 1024  # OpenAI's limit for one image
FETCH_TIMEOUT_S = 10.0  # for each connect and each read, within the fetch's deadline
FETCH_THREADS = 4  # fetches at once (vision_inputs.py), each holding a thread until its deadline
MAX_REDIRECTS = 5
MAX_ADDRESSES = 4  # connected to at most, of those a hop's host resolves to (all checked)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_PORTS = {"http": 80, "https": 443}
_UNSENDABLE = re.compile(r"[\x00-\x20\x7f]")  # what no request line may carry

SockAddr = tuple[int, tuple[Any, ...]]  # a resolved address: its family, and connect()'s tuple


class Unfetchable(Exception):
    """Why an image URL gave no image: for the server's log, never for the client."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a fetch must be done by (time.monotonic()), and how long it was given."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds, seconds)

    def timeout(self) -> float:
        """For the next connect or read: FETCH_TIMEOUT_S, or what is left where that is
        less; Unfetchable once nothing is."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise Unfetchable(f"not fetched within {self.seconds:g} s")
        return min(FETCH_TIMEOUT_S, left)


@dataclass(frozen=True, slots=True)
class Target:
    """Where one hop of a fetch goes, as its URL says."""

    scheme: str
    host: str  # ASCII (IDNA), without brackets: what is resolved, and what TLS names
    port: int
    authority: str  # the Host header: the host, bracketed if IPv6, and a port if the URL has one
    path: str  # with its query

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in _PORTS or not parts.hostname:
            raise Unfetchable("not an http(s) URL with a host")
        try:
            port = parts.port
        except ValueError:
            port = 0
        if port == 0:  # not the scheme's default: no port at all
            raise Unfetchable("a port out of range")
        host = parts.hostname.encode("idna").decode("ascii")
        authority = f"[{host}]" if ":" in host else host
        if port is not None:
            authority += f":{port}"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if _UNSENDABLE.search(path):  # else http.client refuses it, quoting it, query and all
            raise Unfetchable("a path with spaces or control characters")
        return cls(parts.scheme, host, port or _PORTS[parts.scheme], authority, path)


@dataclass(frozen=True, slots=True)
class Fetcher:
    """Fetches image URLs that `hosts` allow, each within `deadline_s` seconds; `tls`: whom
    https trusts (None: the system's certificate authorities)."""

    hosts: ImageHosts = ImageHosts()
    tls: ssl.SSLContext | None = None
    deadline_s: float = ServerSettings.image_fetch_timeout_s

    def fetch(self, url: str) -> bytes:
        """The bytes at `url` (a blocking read), following at most MAX_REDIRECTS redirects,
        each checked; Unfetchable, saying why, where it gives none."""
        deadline = Deadline.after(self.deadline_s)
        try:
            for _ in range(MAX_REDIRECTS + 1):
                deadline.timeout()  # time left for another hop
                target = Target.of(url)
                location, data = self._get(target, deadline)
                if location is None:
                    return data
                url = urljoin(url, location)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise Unfetchable(f"{type(exc).__name__}: {exc}") from exc
        raise Unfetchable(f"more than {MAX_REDIRECTS} redirects")

    def checked(self, target: Target) -> list[SockAddr]:
        """Every address `target`'s host resolves to, each allowed (else Unfetchable)."""
        found = socket.getaddrinfo(
            target.host, target.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        for *_, sockaddr in found:
            address = ipaddress.ip_address(sockaddr[0])
            if not self.hosts.allows(target.host, address):
                raise Unfetchable(f"{target.host} resolves to {address}: not a public address")
        if not found:
            raise Unfetchable(f"{target.host} resolves to no address")
        return [(family, sockaddr) for family, _, _, _, sockaddr in found]

    def _get(self, target: Target, deadline: Deadline) -> tuple[str | None, bytes]:
        """A redirect's Location, or the image's bytes."""
        tls = (self.tls or _system_tls()) if target.scheme == "https" else None
        conn = _Pinned(target, self.checked(target)[:MAX_ADDRESSES], tls, deadline)
        try:
            conn.request("GET", target.path, headers={"Host": target.authority})
            answer = conn.getresponse()
            if answer.status in _REDIRECTS:
                location = answer.getheader("Location")
                if not location:
                    raise Unfetchable(f"HTTP {answer.status} without a Location")
                return location, b""
            if answer.status != 200:
                raise Unfetchable(f"HTTP {answer.status} {answer.reason}")
            data = answer.read(MAX_IMAGE_BYTES + 1)
        finally:
            conn.close()
        if len(data) > MAX_IMAGE_BYTES:
            raise Unfetchable(f"larger than {MAX_IMAGE_BYTES} bytes")
        return None, data


PUBLIC_IMAGES = Fetcher()  # public addresses only, within the default deadline


class _Pinned(http.client.HTTPConnection):
    """A connection to addresses already checked, never to a name looked up again; over TLS,
    the handshake names the URL's host (SNI), whose certificate it must be. Every connect
    and read is timed against the fetch's deadline."""

    def __init__(
        self,
        target: Target,
        addresses: Sequence[SockAddr],
        tls: ssl.SSLContext | None,
        deadline: Deadline,
    ) -> None:
        super().__init__(target.host, target.port, timeout=FETCH_TIMEOUT_S)
        self._addresses = addresses
        self._tls = tls
        self._deadline = deadline
        self.response_class = _responses(deadline)

    def connect(self) -> None:
        sock = _connect(self._addresses, self._deadline)
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        self.sock = sock


def _connect(addresses: Sequence[SockAddr], deadline: Deadline) -> socket.socket:
    """A socket connected to the first of `addresses` that answers in time. Its timeout
    (the TLS handshake's too, and the request's send) is what the deadline leaves."""
    error = OSError("no address")
    for family, sockaddr in addresses:
        timeout = deadline.timeout()
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error


def _responses(deadline: Deadline) -> type[http.client.HTTPResponse]:
    """HTTPResponse, with each read from its socket (status line, headers, body) given at
    most what `deadline` leaves: a server that drips bytes cannot hold a fetch past it."""

    class Response(http.client.HTTPResponse):
        def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
            super().__init__(sock, *args, **kwargs)
            self.fp = io.BufferedReader(_Timed(self.fp.detach(), sock, deadline))

    return Response


class _Timed(io.RawIOBase):
    """A socket's reader (its SocketIO, whose closing the socket's own close waits for),
    each read given at most what the deadline leaves."""

    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: Deadline) -> None:
        super().__init__()
        self._raw = raw
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(self._deadline.timeout())
        try:
            return self._raw.readinto(buffer)
        except TimeoutError:
            self._deadline.timeout()  # said as the deadline, where it is the deadline
            raise

    def close(self) -> None:
        self._raw.close()
        super().close()


@functools.cache
def _system_tls() -> ssl.SSLContext:
    return ssl.create_default_context()
