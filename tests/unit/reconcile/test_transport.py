"""The real client's transport (`ApiClientTransport`, `configuration`, `Kube.connect`) against a local HTTP server
answering as kube-apiserver would (`tests/support/http_apiserver.py`).

The rest of the in-process tier plugs the fake API server in as the `Transport`; these tests run what it skips: the
kubeconfig or service account read into the official client's configuration, the bearer token and TLS, the request
as it goes on the wire (path, query, content type, JSON body), error answers mapped to `KubeError`, a watch stream
framed into events, and the connection pool's bound.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.aio.config import incluster_config

from disagg.reconcile import kube as kube_module
from disagg.reconcile.children import FIELD_MANAGER
from disagg.reconcile.kube import Kube, KubeError, configuration
from tests.support.http_apiserver import (
    HttpApiServer,
    certificate,
    fail,
    kubeconfig,
    reply,
    stall,
    stream,
    text,
)

TOKEN = "operator-token-1"
DEPLOYMENT_PATH = "/apis/apps/v1/namespaces/team/deployments/m-decode"


@pytest.fixture(autouse=True)
def no_cluster_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test's environment names no cluster unless the test says so (CI may run inside a pod)."""
    for variable in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
async def server() -> AsyncIterator[HttpApiServer]:
    api = HttpApiServer()
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
async def kube(server: HttpApiServer, tmp_path: Path) -> AsyncIterator[Kube]:
    client = await Kube.connect(str(kubeconfig(tmp_path, server.url, token=TOKEN)))
    yield client
    await client.close()


def deployment(replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "m-decode", "namespace": "team"},
        "spec": {"replicas": replicas},
    }


async def test_apply_is_a_forced_server_side_apply_by_our_field_manager(server: HttpApiServer, kube: Kube) -> None:
    stored = deployment() | {"metadata": {"name": "m-decode", "namespace": "team", "resourceVersion": "7"}}
    server.answer("PATCH", DEPLOYMENT_PATH, reply(200, stored))
    assert await kube.apply(deployment()) == stored
    [request] = server.received
    assert (request.method, request.path) == ("PATCH", DEPLOYMENT_PATH)
    assert sorted(request.query) == [("fieldManager", FIELD_MANAGER), ("force", "true")]
    assert request.headers["Content-Type"] == "application/apply-patch+yaml"
    assert request.headers["Accept"] == "application/json"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.json() == deployment()  # JSON is YAML: the apply patch is the object as JSON


async def test_create_posts_the_object_and_returns_what_the_server_stored(server: HttpApiServer, kube: Kube) -> None:
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "team"}, "reason": "Scaled"}
    server.answer("POST", "/api/v1/namespaces/team/events", reply(201, event | {"count": 1}))
    await kube.create_event("team", event)
    created = await kube.create(event)
    assert created["count"] == 1
    assert [(r.method, r.path, r.headers["Content-Type"]) for r in server.received] == [
        ("POST", "/api/v1/namespaces/team/events", "application/json")
    ] * 2
    assert all(r.json() == event and r.query == [] for r in server.received)


async def test_status_and_pod_condition_patches_say_their_patch_type(server: HttpApiServer, kube: Kube) -> None:
    status_path = "/apis/disagg.dev/v1alpha1/namespaces/team/disaggdeployments/m/status"
    server.answer("PATCH", status_path, reply(200, {"status": {"phase": "Ready"}}))
    server.answer("PATCH", "/api/v1/namespaces/team/pods/p-0/status", reply(200, {}))
    assert await kube.patch_status("team", "m", {"phase": "Ready"}) == {"status": {"phase": "Ready"}}
    condition = {"type": "disagg.dev/serving", "status": "True"}
    await kube.patch_pod_condition("team", "p-0", "uid-1", condition)
    merge, strategic = server.received
    assert (merge.path, merge.headers["Content-Type"]) == (status_path, "application/merge-patch+json")
    assert merge.json() == {"status": {"phase": "Ready"}}
    assert strategic.headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert strategic.json() == {"metadata": {"uid": "uid-1"}, "status": {"conditions": [condition]}}


async def test_a_list_sends_its_selector_and_paging_encoded(server: HttpApiServer, kube: Kube) -> None:
    answer = {"metadata": {"resourceVersion": "41", "continue": "page-2"}, "items": [{"metadata": {"name": "a"}}]}
    server.answer("GET", "/apis/apps/v1/deployments", reply(200, answer))
    selector = "app.kubernetes.io/managed-by=disagg-operator,disagg.dev/role in (prefill,decode)"
    items, version, after = await kube.list_page("Deployment", None, selector, limit=50, after="page-1")
    assert (version, after) == ("41", "page-2")
    assert items == [{"metadata": {"name": "a"}, "kind": "Deployment", "apiVersion": "apps/v1"}]
    [request] = server.received
    assert request.query == [("labelSelector", selector), ("limit", "50"), ("continue", "page-1")]
    assert request.body == b""  # a read sends no body


async def test_a_missing_object_is_none_and_a_missing_api_is_told_apart(server: HttpApiServer, kube: Kube) -> None:
    # No answer scripted: the server's Status 404 for an object that does not exist.
    assert await kube.get("Deployment", "team", "m-decode") is None
    lws = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/team/leaderworkersets"
    server.answer("GET", lws, text(404, "404 page not found\n"))
    with pytest.raises(KubeError) as raised:
        await kube.list("LeaderWorkerSet", "team", "a=b")
    assert raised.value.status == 404 and raised.value.api_missing


@pytest.mark.parametrize(
    ("code", "reason", "message", "transient"),
    [
        (409, "Conflict", 'Operation cannot be fulfilled on deployments.apps "m-decode"', True),
        (422, "Invalid", 'Deployment.apps "m-decode" is invalid: spec.replicas: Invalid value: -1', False),
        (500, "InternalError", "etcdserver: request timed out", True),
        (403, "Forbidden", 'deployments.apps "m-decode" is forbidden: User cannot patch', False),
    ],
)
async def test_an_error_answer_is_a_kube_error_with_the_servers_reason_and_message(
    server: HttpApiServer, kube: Kube, code: int, reason: str, message: str, transient: bool
) -> None:
    server.answer("PATCH", DEPLOYMENT_PATH, fail(code, reason, message))
    with pytest.raises(KubeError) as raised:
        await kube.apply(deployment())
    assert (raised.value.status, raised.value.reason, raised.value.message) == (code, reason, message)
    assert raised.value.transient is transient


async def test_an_error_that_is_not_a_status_keeps_the_http_reason_and_the_text(
    server: HttpApiServer, kube: Kube
) -> None:
    server.answer("GET", DEPLOYMENT_PATH, text(503, "upstream connect error"))
    with pytest.raises(KubeError) as raised:
        await kube.get("Deployment", "team", "m-decode")
    assert (raised.value.status, raised.value.reason, raised.value.message) == (
        503,
        "Service Unavailable",
        "upstream connect error",
    )


async def test_delete_sends_the_policy_and_the_uid_precondition_and_gone_is_fine(
    server: HttpApiServer, kube: Kube
) -> None:
    server.answer(
        "DELETE", DEPLOYMENT_PATH, reply(200, {"kind": "Status", "status": "Success"}), fail(404, "NotFound", "gone")
    )
    await kube.delete("Deployment", "team", "m-decode", uid="uid-9")
    await kube.delete("Deployment", "team", "m-decode")  # already gone: nothing of ours left
    first, second = server.received
    assert first.headers["Content-Type"] == "application/json"
    assert first.json() == {"propagationPolicy": "Background", "preconditions": {"uid": "uid-9"}}
    assert second.json() == {"propagationPolicy": "Background"}


async def test_an_unreachable_server_is_a_transient_error(server: HttpApiServer, kube: Kube) -> None:
    await server.stop()  # nothing listens on the port any more
    with pytest.raises(KubeError) as raised:
        await kube.get("Deployment", "team", "m-decode")
    assert (raised.value.status, raised.value.reason) == (0, "ConnectionError")
    assert f"127.0.0.1:{server.port}" in raised.value.message  # the cause's text: where it could not connect
    assert raised.value.transient


async def test_a_request_the_server_never_answers_times_out_as_a_transient_error(
    server: HttpApiServer, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_module, "REQUEST_TIMEOUT_S", 0.3)
    server.answer("GET", DEPLOYMENT_PATH, stall(30))
    with pytest.raises(KubeError) as raised:
        await asyncio.wait_for(kube.get("Deployment", "team", "m-decode"), 10)
    assert (raised.value.status, raised.value.reason) == (0, "ConnectionError")
    assert raised.value.message == "TimeoutError"  # aiohttp's timeout has no text: its type is the message


def event(kind: str, name: str, version: str) -> dict[str, Any]:
    return {"type": kind, "object": {"kind": "Pod", "metadata": {"name": name, "resourceVersion": version}}}


def lines(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


async def test_a_watch_yields_each_event_whatever_the_chunks(server: HttpApiServer, kube: Kube) -> None:
    added, modified = event("ADDED", "p-0", "10"), event("MODIFIED", "p-0", "11")
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "12"}}}
    wire = lines(added, modified) + b"\n" + lines(bookmark)  # a keep-alive blank line between events
    # Split inside the first event, at its newline, and inside the last: the framing is by line, not by chunk.
    chunks = [wire[:7], wire[7 : wire.index(b"\n") + 1], wire[wire.index(b"\n") + 1 : -5], wire[-5:]]
    server.answer("GET", "/api/v1/namespaces/team/pods", stream(chunks, gap_s=0.01))
    events = [e async for e in kube.watch("Pod", "team", "disagg.dev/name=m", since="9", timeout_seconds=290)]
    assert events == [added, modified, bookmark]
    [request] = server.received
    assert request.query == [
        ("watch", "1"),
        ("allowWatchBookmarks", "true"),
        ("labelSelector", "disagg.dev/name=m"),
        ("timeoutSeconds", "290"),
        ("resourceVersion", "9"),
    ]
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Accept"] == "application/json"


async def test_a_watch_from_the_start_sends_no_resource_version(server: HttpApiServer, kube: Kube) -> None:
    server.answer("GET", "/apis/apps/v1/deployments", stream([lines(event("ADDED", "d", "1"))]))
    assert [e["type"] async for e in kube.watch("Deployment", None, "a=b", since=None, timeout_seconds=60)] == ["ADDED"]
    assert "resourceVersion" not in dict(server.received[0].query)


async def test_a_refused_watch_raises_the_servers_error(server: HttpApiServer, kube: Kube) -> None:
    server.answer(
        "GET", "/apis/apps/v1/daemonsets", fail(403, "Forbidden", 'daemonsets.apps is forbidden: cannot "watch"')
    )
    with pytest.raises(KubeError) as raised:
        _ = [e async for e in kube.watch("DaemonSet", None, "a=b", since="5", timeout_seconds=60)]
    assert (raised.value.status, raised.value.reason) == (403, "Forbidden")
    assert 'cannot "watch"' in raised.value.message


async def test_a_watch_refused_as_a_bad_request_is_an_error_not_an_event(server: HttpApiServer, kube: Kube) -> None:
    message = 'unable to parse requirement: invalid label key "a b"'
    server.answer("GET", "/api/v1/namespaces/team/pods", fail(400, "BadRequest", message))
    with pytest.raises(KubeError) as raised:
        _ = [e async for e in kube.watch("Pod", "team", "a b=c", since="9", timeout_seconds=60)]
    assert (raised.value.status, raised.value.reason, raised.value.message) == (400, "BadRequest", message)
    assert not raised.value.transient


async def test_a_watch_answered_by_something_else_than_the_api_server_keeps_the_http_reason(
    server: HttpApiServer, kube: Kube
) -> None:
    server.answer("GET", "/api/v1/namespaces/team/pods", text(503, "no healthy upstream"))
    with pytest.raises(KubeError) as raised:
        _ = [e async for e in kube.watch("Pod", "team", "a=b", since="9", timeout_seconds=60)]
    assert (raised.value.status, raised.value.reason, raised.value.message) == (
        503,
        "Service Unavailable",
        "no healthy upstream",
    )


async def test_a_watch_cut_off_mid_event_is_a_transient_error_after_the_whole_events(
    server: HttpApiServer, kube: Kube
) -> None:
    first = event("ADDED", "p-0", "10")
    server.answer(
        "GET", "/api/v1/namespaces/team/pods", stream([lines(first), b'{"type": "MOD'], then="cut", gap_s=0.05)
    )
    seen: list[dict[str, Any]] = []
    with pytest.raises(KubeError) as raised:
        async for item in kube.watch("Pod", "team", "a=b", since="9", timeout_seconds=60):
            seen.append(item)
    assert seen == [first]  # the half event is never parsed
    assert (raised.value.status, raised.value.reason) == (0, "ConnectionError") and raised.value.transient
    assert "payload is not completed" in raised.value.message  # the cause's text, not only its type


async def test_a_silent_watch_is_found_dead_by_the_read_timeout(
    server: HttpApiServer, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_module, "WATCH_READ_TIMEOUT_S", 0.3)
    server.answer("GET", "/api/v1/namespaces/team/pods", stream([lines(event("ADDED", "p-0", "10"))], then="silent"))
    seen: list[str] = []

    async def read() -> None:
        async for item in kube.watch("Pod", "team", "a=b", since="9", timeout_seconds=300):
            seen.append(item["type"])

    with pytest.raises(KubeError) as raised:
        await asyncio.wait_for(read(), 10)
    assert seen == ["ADDED"]
    assert (raised.value.status, raised.value.reason) == (0, "ConnectionError")
    assert "timeout" in raised.value.message.lower()


async def test_a_watch_is_not_cut_by_the_request_timeout(
    server: HttpApiServer, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch lasts until the server ends it (its timeoutSeconds), far past one request's timeout, as long as
    something arrives within the read timeout."""
    monkeypatch.setattr(kube_module, "REQUEST_TIMEOUT_S", 0.2)
    chunks = [lines(event("MODIFIED", "p-0", str(v))) for v in range(10, 16)]
    server.answer("GET", "/api/v1/namespaces/team/pods", stream(chunks, gap_s=0.1))
    seen = [e async for e in kube.watch("Pod", "team", "a=b", since="9", timeout_seconds=60)]
    assert len(seen) == 6


# Configuration: where the operator finds its cluster and credentials.


async def test_the_kubeconfig_given_is_read(server: HttpApiServer, tmp_path: Path) -> None:
    config = await configuration(str(kubeconfig(tmp_path, server.url, token=TOKEN)))
    assert config.host == server.url
    assert config.api_key["BearerToken"] == f"Bearer {TOKEN}"


async def test_kubeconfig_from_the_environment_when_none_is_given(
    server: HttpApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, server.url, token="from-env")))
    client = await Kube.connect()
    try:
        server.answer("GET", DEPLOYMENT_PATH, reply(200, deployment()))
        assert await client.get("Deployment", "team", "m-decode") == deployment()
    finally:
        await client.close()
    assert server.received[0].headers["Authorization"] == "Bearer from-env"


async def test_the_kubeconfig_given_wins_over_the_environment(
    server: HttpApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, "http://127.0.0.1:1", token="env", name="env")))
    given = kubeconfig(tmp_path, server.url, token="given", name="given")
    config = await configuration(str(given))
    assert (config.host, config.api_key["BearerToken"]) == (server.url, "Bearer given")


@pytest.fixture
def service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any]:
    """The files Kubernetes mounts into a pod (token and CA), where the client looks for them, and a serving
    certificate for 127.0.0.1 that CA trusts."""
    cert = certificate(ips=("127.0.0.1",))
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(cert.pem)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    return tmp_path, cert


async def test_in_a_pod_the_service_account_is_used_over_verified_tls(
    service_account: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, cert = service_account
    api = HttpApiServer(tls=cert.server_context(directory))
    await api.start()
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
    api.answer("GET", DEPLOYMENT_PATH, reply(200, deployment()))
    client = await Kube.connect()
    try:
        assert await client.get("Deployment", "team", "m-decode") == deployment()
    finally:
        await client.close()
        await api.stop()
    scheme, token = api.received[0].headers["Authorization"].split(" ")
    assert (scheme.lower(), token) == ("bearer", "sa-token")  # the client writes "bearer": schemes ignore case


async def test_a_kubeconfig_wins_over_the_pods_service_account(
    server: HttpApiServer, service_account: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from a pod with a kubeconfig (KUBECONFIG, or given), the operator uses that cluster."""
    directory, _ = service_account
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    given = kubeconfig(directory, server.url, token="given")
    assert (await configuration(str(given))).api_key["BearerToken"] == "Bearer given"
    monkeypatch.setenv("KUBECONFIG", str(given))
    assert (await configuration()).host == server.url


async def test_without_kubeconfig_or_service_account_configuration_fails(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="config"):
        await configuration(str(tmp_path / "missing"))


async def test_the_kubeconfigs_ca_and_tls_server_name_are_used(tmp_path: Path) -> None:
    """A certificate for the cluster's DNS name only, served at an IP: verified against the kubeconfig's CA under
    its `tls-server-name`; without that name the same server is refused."""
    cert = certificate(dns=("kubernetes.default.svc",))
    api = HttpApiServer(tls=cert.server_context(tmp_path))
    await api.start()
    api.answer("GET", DEPLOYMENT_PATH, reply(200, deployment()))
    named = await Kube.connect(
        str(kubeconfig(tmp_path, api.url, token=TOKEN, ca=cert, tls_server_name="kubernetes.default.svc", name="a"))
    )
    unnamed = await Kube.connect(str(kubeconfig(tmp_path, api.url, token=TOKEN, ca=cert, name="b")))
    try:
        assert await named.get("Deployment", "team", "m-decode") == deployment()
        with pytest.raises(KubeError) as raised:
            await unnamed.get("Deployment", "team", "m-decode")
        assert raised.value.status == 0 and "certificate" in raised.value.message.lower()
    finally:
        await named.close()
        await unnamed.close()
        await api.stop()
    assert len(api.received) == 1


async def test_the_kubeconfigs_proxy_carries_the_requests(server: HttpApiServer, tmp_path: Path) -> None:
    # The cluster's own address does not resolve: only the proxy (our server) can answer.
    server.answer("GET", DEPLOYMENT_PATH, reply(200, deployment()))
    config = kubeconfig(tmp_path, "http://kube-apiserver.invalid:6443", token=TOKEN, proxy_url=server.url)
    client = await Kube.connect(str(config))
    try:
        assert await client.get("Deployment", "team", "m-decode") == deployment()
    finally:
        await client.close()
    [request] = server.received
    assert request.absolute_url and request.headers["Host"] == "kube-apiserver.invalid:6443"


async def test_proxy_variables_of_the_environment_are_not_used(
    server: HttpApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server is reached directly unless the kubeconfig names a proxy: HTTP(S)_PROXY in the operator's pod
    are for its other traffic."""
    elsewhere = HttpApiServer()
    await elsewhere.start()
    for variable in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(variable, elsewhere.url)
    for variable in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(variable, raising=False)
    server.answer("GET", DEPLOYMENT_PATH, reply(200, deployment()))
    client = await Kube.connect(str(kubeconfig(tmp_path, server.url, token=TOKEN)))
    try:
        assert await client.get("Deployment", "team", "m-decode") == deployment()
    finally:
        await client.close()
        await elsewhere.stop()
    assert (len(server.received), elsewhere.received) == (1, [])


async def test_a_client_closed_before_any_request_closes_cleanly(server: HttpApiServer, tmp_path: Path) -> None:
    """A replica that stops before its first request (it lost the election at once, say) still shuts down."""
    client = await Kube.connect(str(kubeconfig(tmp_path, server.url, token=TOKEN)))
    await client.close()
    assert server.received == []


async def test_connections_bound_the_requests_in_flight(server: HttpApiServer, tmp_path: Path) -> None:
    in_flight = 0
    most = 0
    release = asyncio.Event()

    async def slow(_: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await release.wait()
        in_flight -= 1
        return await reply(200, deployment())(_)

    server.answer("GET", DEPLOYMENT_PATH, slow)
    client = await Kube.connect(str(kubeconfig(tmp_path, server.url, token=TOKEN)), connections=2)
    try:
        gets = [asyncio.create_task(client.get("Deployment", "team", "m-decode")) for _ in range(4)]
        while in_flight < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # time for more to arrive, if the pool let them
        assert most == 2
        release.set()
        assert await asyncio.gather(*gets) == [deployment()] * 4
    finally:
        await client.close()
