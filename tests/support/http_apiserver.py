"""A local HTTP server answering the way kube-apiserver answers, for the real client's transport.

The in-process tier plugs `tests/support/fake_kube.py` in as the client's `Transport`, so the code that turns a
request into HTTP (the official client's configuration and authentication, our aiohttp session, the watch stream's
line framing) runs only against a real API server in the e2e tier. This server is on 127.0.0.1 in the test's own
event loop: it records every request as it arrived on the wire and answers what the test scripted (JSON bodies and
Status objects with their codes, a bare text 404 for a group nothing serves, a watch as newline-delimited JSON written
in whatever chunks the test chooses, a stream left silent or cut off), optionally over TLS with a certificate made for
the test. It models no storage: `tests/support/fake_kube.py` does that, and `e2e/test_fake_kube_contract.py` holds
it to the real server.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    query: list[tuple[str, str]]
    headers: Mapping[str, str]
    """Looked up regardless of case, as HTTP header names are."""
    body: bytes
    absolute_url: bool
    """The request line carried a whole URL (`GET http://host/path`), as a client sends it to a proxy."""

    def json(self) -> Any:
        return json.loads(self.body)


def status(code: int, reason: str, message: str) -> web.Response:
    """An error answer as the API server writes it: a `Status` object with the code, reason and message."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
    return web.json_response(body | {"code": code}, status=code)


def reply(code: int, body: Any) -> Answer:
    async def answer(_: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=code)

    return answer


def fail(code: int, reason: str, message: str) -> Answer:
    async def answer(_: web.Request) -> web.StreamResponse:
        return status(code, reason, message)

    return answer


def text(code: int, body: str) -> Answer:
    """A plain-text answer, as the API server gives for a path nothing serves ("404 page not found")."""

    async def answer(_: web.Request) -> web.StreamResponse:
        return web.Response(status=code, text=body)

    return answer


def stream(chunks: list[bytes], *, then: str = "end", gap_s: float = 0.0) -> Answer:
    """A watch answer: 200, then `chunks` written one by one (each flushed), then the stream ends cleanly
    (`then="end"`), stays open writing nothing (`"silent"`), or the connection is cut mid-chunk (`"cut"`)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
            await asyncio.sleep(gap_s)  # lets the client read each chunk apart
        if then == "silent":
            await asyncio.sleep(3600)
        if then == "cut":
            assert request.transport is not None
            request.transport.abort()  # no terminating chunk: the client sees a broken payload
            return response
        await response.write_eof()
        return response

    return answer


def stall(seconds: float) -> Answer:
    """Accept the request and answer nothing for `seconds`."""

    async def answer(_: web.Request) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.json_response({})

    return answer


@dataclass
class HttpApiServer:
    """Answers scripted per (method, path); a path with no script gets the API server's 404 for a missing object."""

    tls: ssl.SSLContext | None = None
    host: str = "127.0.0.1"
    received: list[Received] = field(default_factory=list)
    answers: dict[tuple[str, str], list[Answer]] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    port: int = 0

    def answer(self, method: str, path: str, *answers: Answer) -> None:
        """Answer the next requests to `method path` with `answers` in turn; the last one is kept for the rest."""
        self.answers[(method, path)] = list(answers)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append(
            Received(
                method=request.method,
                path=request.path,
                query=list(request.query.items()),
                headers=CIMultiDict(request.headers),
                body=body,
                absolute_url=request.raw_path.startswith("http"),
            )
        )
        scripted = self.answers.get((request.method, request.path))
        if not scripted:
            return status(404, "NotFound", f"{request.path} not found")
        answer = scripted.pop(0) if len(scripted) > 1 else scripted[0]
        return await answer(request)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)  # handlers left stalled are cut
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0, ssl_context=self.tls)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"


@dataclass(frozen=True)
class Certificate:
    """A self-signed serving certificate (its own CA) for the names given, and the server's TLS context."""

    pem: bytes
    key_pem: bytes

    def server_context(self, directory: Path) -> ssl.SSLContext:
        cert, key = directory / "server.crt", directory / "server.key"
        cert.write_bytes(self.pem)
        key.write_bytes(self.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        return context

    @property
    def base64(self) -> str:
        return base64.b64encode(self.pem).decode()


def certificate(*, dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    alternative = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return Certificate(cert.public_bytes(serialization.Encoding.PEM), key_pem)


def kubeconfig(
    directory: Path,
    server: str,
    *,
    token: str = "",
    ca: Certificate | None = None,
    tls_server_name: str = "",
    proxy_url: str = "",
    name: str = "config",
) -> Path:
    """A kubeconfig file with one cluster, one user (a bearer token) and its current context."""
    cluster: dict[str, Any] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = ca.base64
    if tls_server_name:
        cluster["tls-server-name"] = tls_server_name
    if proxy_url:
        cluster["proxy-url"] = proxy_url
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": "test", "user": {"token": token} if token else {}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    location = directory / name
    location.write_text(json.dumps(document))  # JSON is YAML
    return location
