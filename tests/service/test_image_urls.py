"""Image URLs may not reach the server's own network: the address policy (every spelling and
family of a private address refused, every address of a name checked, the operator's allowed
hosts and networks), redirects checked hop by hop, the connection made to the very address
that was checked (no second lookup: DNS rebinding) under the URL's Host and TLS name. Image
servers run on 127.0.0.1 only; names are answered by a resolver the test controls."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from omni.errors import InvalidRequest
from omni.image_hosts import ImageHosts, public
from omni.service import image_urls
from omni.service.image_urls import (
    MAX_REDIRECTS,
    Fetcher,
    Target,
    Unfetchable,
)
from omni.service.vision_inputs import ImageRef, load_images

CAT = b"\x89PNG pretend"  # the fetch checks no format (vision_inputs.py does)
PUBLIC = "93.184.216.34"


class _Host(BaseHTTPRequestHandler):
    """/cat.png; /to?URL: a redirect to URL; anything else: 404. Records what it was asked."""

    asked: list[tuple[str, str]] = []  # (path, Host header)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Host.asked.append((self.path, self.headers["Host"]))
        if self.path.startswith("/to?"):
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/to?"))
            self.end_headers()
            return
        found = self.path == "/cat.png"
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(CAT) if found else 0))
        self.end_headers()
        self.wfile.write(CAT if found else b"")

    def log_message(self, *args: Any) -> None:
        pass


def _serving(httpd: ThreadingHTTPServer) -> Iterator[int]:
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    _Host.asked.clear()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def port() -> Iterator[int]:
    """An image server's port on 127.0.0.1."""
    yield from _serving(ThreadingHTTPServer(("127.0.0.1", 0), _Host))


class Resolver:
    """Answers the names a test gives it: one list of addresses per lookup (the last one
    repeated), counting lookups; other names are resolved as usual."""

    def __init__(self) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.looked: dict[str, int] = {}
        self.real = socket.getaddrinfo

    def __setitem__(self, name: str, answers: list[list[str]]) -> None:
        self.answers[name] = answers

    def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in self.answers:
            return self.real(host, port, *args, **kwargs)
        n = self.looked[host] = self.looked.get(host, 0) + 1
        addresses = self.answers[host][min(n, len(self.answers[host])) - 1]
        return [_info(a, int(port)) for a in addresses]


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch) -> Resolver:
    resolver = Resolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver.getaddrinfo)
    return resolver


def _info(address: str, port: int) -> tuple[Any, ...]:
    if ":" in address:
        return (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))


@pytest.fixture
def no_connect(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Connections are recorded and fail: for URLs that must be refused before any."""
    tried: list[Any] = []

    def connect(addresses: Any, *_: Any) -> socket.socket:
        tried.append(addresses)
        raise ConnectionRefusedError("not in this test")

    monkeypatch.setattr(image_urls, "_connect", connect)
    return tried


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1", "localhost", "[::1]", "127.1", "0x7f.1", "2130706433", "0177.0.0.1",
        "127.9.9.9", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "0.0.0.0", "[::]",
        "169.254.169.254", "[fe80::1]", "10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1",
        "[fc00::1]", "[fd12:3456::1]", "224.0.0.1", "239.255.255.250", "[ff02::1]",
        "240.0.0.1", "255.255.255.255", "198.18.0.1", "[::7f00:1]", "[2002:7f00:1::1]",
        "[64:ff9b::a9fe:a9fe]", "[64:ff9b::7f00:1]", "[2001:db8::1]", "[fec0::1]",
    ],
)  # fmt: skip
def test_every_spelling_and_family_of_a_private_address_is_refused(
    host: str, no_connect: list[Any]
) -> None:
    with pytest.raises(Unfetchable, match="not a public address"):
        Fetcher().fetch(f"http://{host}:8080/cat.png")
    with pytest.raises(Unfetchable, match="not a public address"):
        Fetcher().fetch(f"https://{host}/cat.png")
    assert no_connect == []


@pytest.mark.parametrize(
    "address",
    [PUBLIC, "1.1.1.1", "2606:4700::1111", "::ffff:93.184.216.34", "2002:5db8:d822::1",
     "64:ff9b::808:808"],
)  # fmt: skip
def test_a_public_address_is_allowed(address: str) -> None:
    """NAT64 (64:ff9b::/96) as the IPv4 address it carries: a public one is public, though
    Python's table calls the whole prefix reserved."""
    assert public(ipaddress.ip_address(address))
    assert ImageHosts().allows("images.example", ipaddress.ip_address(address))


def test_every_address_a_name_resolves_to_is_checked(
    names: Resolver, no_connect: list[Any]
) -> None:
    names["mixed.example"] = [[PUBLIC, "10.0.0.7"]]
    names["sly.example"] = [["::ffff:169.254.169.254", PUBLIC]]
    names["fine.example"] = [[PUBLIC, "2606:4700::1111"]]
    for host in ("mixed.example", "sly.example"):
        with pytest.raises(Unfetchable, match="not a public address"):
            Fetcher().fetch(f"http://{host}/cat.png")
    assert no_connect == []
    checked = Fetcher().checked(Target.of("https://fine.example/cat.png"))
    assert [sockaddr[:2] for _, sockaddr in checked] == [(PUBLIC, 443), ("2606:4700::1111", 443)]


def test_allowed_hosts_and_networks() -> None:
    hosts = ImageHosts.parse(["10.1.0.0/16", "Images.LAN", "*.corp.test", "[::1]", "127.0.0.1"])
    ip = ipaddress.ip_address
    assert hosts.allows("anything", ip("10.1.2.3")) and not hosts.allows("x", ip("10.2.0.1"))
    assert hosts.allows("images.lan", ip("192.168.0.5")) and hosts.allows("IMAGES.lan.", ip("::1"))
    assert hosts.allows("a.b.corp.test", ip("10.9.9.9"))
    assert not hosts.allows("corp.test", ip("10.9.9.9"))
    assert hosts.allows("x", ip("::1")) and hosts.allows("x", ip("::ffff:127.0.0.1"))
    assert not hosts.allows("x", ip("127.0.0.2")) and not ImageHosts().allows("x", ip("::1"))
    assert hosts.allows("x", ip(PUBLIC))  # public addresses stay allowed
    for bad in ("10.0.0.0/33", "images.lan:8080", "two words", "http://x"):
        with pytest.raises(ValueError, match="neither a host name"):
            ImageHosts.parse([bad])


def test_an_allowed_host_is_fetched_with_its_own_host_header(port: int, names: Resolver) -> None:
    names["images.lan"] = [["127.0.0.1"]]
    by_name, by_network = ImageHosts.parse(["images.lan"]), ImageHosts.parse(["127.0.0.0/8"])
    assert Fetcher(by_name).fetch(f"http://images.lan:{port}/cat.png") == CAT
    assert Fetcher(by_network).fetch(f"http://127.0.0.1:{port}/cat.png") == CAT
    assert _Host.asked == [("/cat.png", f"images.lan:{port}"), ("/cat.png", f"127.0.0.1:{port}")]
    with pytest.raises(Unfetchable, match="HTTP 404"):
        Fetcher(ImageHosts.parse(["127.0.0.1"])).fetch(f"http://127.0.0.1:{port}/dog.png")


def test_every_redirect_hop_is_checked(port: int, names: Resolver) -> None:
    """A redirect from an allowed host to a loopback one is refused (its target is never
    asked), though the same server's own redirects are followed."""
    names["images.lan"] = [["127.0.0.1"]]
    fetcher = Fetcher(ImageHosts.parse(["images.lan"]))
    base = f"http://images.lan:{port}"
    assert fetcher.fetch(f"{base}/to?/cat.png") == CAT
    assert fetcher.fetch(f"{base}/to?{base}/to?/cat.png") == CAT
    _Host.asked.clear()
    for target in (f"http://127.0.0.1:{port}/cat.png", f"http://localhost:{port}/cat.png"):
        with pytest.raises(Unfetchable, match="not a public address"):
            fetcher.fetch(f"{base}/to?{target}")
    assert [path for path, _ in _Host.asked] == [
        f"/to?http://127.0.0.1:{port}/cat.png", f"/to?http://localhost:{port}/cat.png"
    ]  # fmt: skip
    for scheme in ("file:///etc/passwd", "ftp://images.lan/cat.png"):
        with pytest.raises(Unfetchable, match="not an http"):
            fetcher.fetch(f"{base}/to?{scheme}")


def test_redirects_are_bounded(port: int, names: Resolver) -> None:
    names["images.lan"] = [["127.0.0.1"]]
    loop = f"http://images.lan:{port}/to?" * (MAX_REDIRECTS + 1) + "/cat.png"
    with pytest.raises(Unfetchable, match="redirects"):
        Fetcher(ImageHosts.parse(["images.lan"])).fetch(loop)
    assert len(_Host.asked) == MAX_REDIRECTS + 1


def test_the_checked_address_is_the_one_connected_to(
    port: int, names: Resolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: a name that answers an allowed address, then another, is looked up once
    and connected to at the first answer."""
    names["images.lan"] = [["127.0.0.1"], ["10.255.255.1"]]
    names["rebind.example"] = [[PUBLIC], ["127.0.0.1"]]
    connected: list[Any] = []
    real = image_urls._connect

    def connect(addresses: Any, *rest: Any) -> socket.socket:
        connected.append([sockaddr[0] for _, sockaddr in addresses])
        if addresses[0][1][0] == PUBLIC:
            raise TimeoutError("no internet here")
        return real(addresses, *rest)

    monkeypatch.setattr(image_urls, "_connect", connect)
    fetcher = Fetcher(ImageHosts.parse(["images.lan"]))
    assert fetcher.fetch(f"http://images.lan:{port}/cat.png") == CAT
    with pytest.raises(Unfetchable, match="TimeoutError"):
        Fetcher().fetch(f"http://rebind.example:{port}/cat.png")
    assert names.looked == {"images.lan": 1, "rebind.example": 1}
    assert connected == [["127.0.0.1"], [PUBLIC]]


def _certificate(name: str) -> tuple[bytes, bytes]:
    """A self-signed certificate for `name` and its key, both PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


@pytest.fixture
def tls_host(tmp_path: Any) -> Iterator[tuple[int, bytes, list[str | None]]]:
    """An https image server on 127.0.0.1 whose certificate names images.lan: its port, the
    certificate, and the names clients' handshakes asked for (SNI)."""
    cert, key = _certificate("images.lan")
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    asked: list[str | None] = []
    context.sni_callback = _recording(asked)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Host)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    for port in _serving(httpd):
        yield port, cert, asked


def _recording(asked: list[str | None]) -> Callable[[Any, str | None, Any], None]:
    def callback(_: Any, name: str | None, __: Any) -> None:
        asked.append(name)

    return callback


def test_https_verifies_the_certificate_against_the_urls_host(
    tls_host: tuple[int, bytes, list[str | None]], names: Resolver
) -> None:
    port, cert, sni = tls_host
    names["images.lan"] = [["127.0.0.1"]]
    trust = ssl.create_default_context(cadata=cert.decode())
    fetcher = Fetcher(ImageHosts.parse(["images.lan", "127.0.0.1"]), tls=trust)
    assert fetcher.fetch(f"https://images.lan:{port}/cat.png") == CAT
    assert sni == ["images.lan"] and _Host.asked == [("/cat.png", f"images.lan:{port}")]
    with pytest.raises(Unfetchable, match="CertificateError|SSL"):  # not the address's name
        fetcher.fetch(f"https://127.0.0.1:{port}/cat.png")
    with pytest.raises(Unfetchable, match="CertificateError|SSL"):  # nor a CA the system trusts
        Fetcher(ImageHosts.parse(["images.lan"])).fetch(f"https://images.lan:{port}/cat.png")


@pytest.mark.parametrize("port", ["0", "65536", "99999", "-1"])
def test_a_port_out_of_range_is_refused(port: str, no_connect: list[Any]) -> None:
    """Port 0 is no port (not the scheme's default): refused before any connection."""
    with pytest.raises(Unfetchable):
        Target.of(f"http://images.lan:{port}/cat.png")
    with pytest.raises(Unfetchable):
        Fetcher(ImageHosts.parse(["127.0.0.1"])).fetch(f"http://127.0.0.1:{port}/cat.png")
    assert no_connect == []


def test_a_hop_tries_a_few_of_the_addresses_a_name_resolves_to(
    names: Resolver, no_connect: list[Any]
) -> None:
    """Each address is checked (the last one here is private), but a connection is tried
    at a few only: a name of a hundred dead addresses cannot hold a fetch a hundred times."""
    many = [f"93.184.216.{n}" for n in range(1, 9)]
    names["many.example"] = [many]
    names["sly.example"] = [[*many, "10.0.0.1"]]
    with pytest.raises(Unfetchable, match="ConnectionRefusedError"):
        Fetcher().fetch("http://many.example/cat.png")
    assert [[sockaddr[0] for _, sockaddr in tried] for tried in no_connect] == [many[:4]]
    assert image_urls.MAX_ADDRESSES == 4
    with pytest.raises(Unfetchable, match="not a public address"):
        Fetcher().fetch("http://sly.example/cat.png")
    assert len(no_connect) == 1


class _Slow(BaseHTTPRequestHandler):
    """/drip: a megabyte's Content-Length, then a byte every 10 ms (at most `DRIPS`: a
    fetch that is never cut fails at last); /hold: an answer once `release` is set."""

    DRIPS = 2000
    dripped: list[int] = []  # bytes sent, one entry a request: the last one grows
    finished = threading.Event()  # a drip sent all it would
    held: list[str] = []
    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/drip":
            self._drip()
            return
        _Slow.held.append(self.path)
        _Slow.release.wait()
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _drip(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 20))
        self.end_headers()
        _Slow.dripped.append(0)
        try:
            for _ in range(self.DRIPS):
                self.wfile.write(b"\0")
                _Slow.dripped[-1] += 1
                _Slow.release.wait(0.01)  # the drip's pace, not an order of events
        except OSError:  # the fetch hung up
            return
        _Slow.finished.set()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def slow() -> Iterator[str]:
    """The base URL of a slow server on 127.0.0.1."""
    _Slow.dripped, _Slow.held = [], []
    _Slow.finished.clear()
    _Slow.release.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    httpd.daemon_threads = True
    for port in _serving(httpd):
        yield f"http://127.0.0.1:{port}"
        _Slow.release.set()


ALLOWED = ImageHosts.parse(["127.0.0.1"])
PART = "input[0].content[1]"


async def test_a_slow_drip_is_cut_at_the_deadline(
    slow: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each read gets a byte well within its timeout, yet the fetch as a whole ends at its
    deadline, while the server still drips: the client's one message, the log's reason."""
    with caplog.at_level(logging.INFO, logger="omni.service.vision_inputs"):
        with pytest.raises(InvalidRequest) as cut:
            await load_images([ImageRef(f"{slow}/drip", PART)], Fetcher(ALLOWED, deadline_s=0.2))
        with pytest.raises(InvalidRequest) as missing:
            await load_images([ImageRef(f"{slow}/gone", PART)], Fetcher(ALLOWED, deadline_s=0))
    assert not _Slow.finished.is_set() and _Slow.dripped[0] >= 1  # cut mid-body
    assert cut.value.code == "failed_to_download_image" and cut.value.param == PART
    assert cut.value.message == missing.value.message
    reasons = [r.getMessage() for r in caplog.records if r.name == "omni.service.vision_inputs"]
    assert [reason.rsplit(": ", 1)[1] for reason in reasons] == [
        "not fetched within 0.2 s",
        "not fetched within 0 s",
    ]


async def test_fetches_leave_the_default_executor_free(slow: str) -> None:
    """Fetches run on a few threads of their own: however many hang, the default executor
    (where models load) still runs work, and the fetches beyond those threads wait."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(image_urls.FETCH_THREADS + 1))
    fetcher = Fetcher(ALLOWED)
    hung = [
        asyncio.create_task(load_images([ImageRef(f"{slow}/hold{i}", PART)], fetcher))
        for i in range(image_urls.FETCH_THREADS + 1)
    ]
    while len(_Slow.held) < image_urls.FETCH_THREADS:  # the server holds a pool's worth
        await asyncio.sleep(0.01)
    try:
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 30) == "free"
        assert len(_Slow.held) == image_urls.FETCH_THREADS  # the last fetch waits its turn
    finally:
        _Slow.release.set()
        done = await asyncio.gather(*hung, return_exceptions=True)
    assert all(isinstance(e, InvalidRequest) for e in done) and len(_Slow.held) == len(hung)
