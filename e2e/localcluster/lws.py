"""The LeaderWorkerSet controller, run out-of-cluster against the local apiserver.

LWS depends on its admission webhooks (the pod webhook writes the group and
worker indices that the controller relies on), and the released manifests
point them at an in-cluster Service, which cannot be reached here. So: the
controller serves its webhooks on 127.0.0.1 with a certificate from our CA,
its own cert rotation is off, and the released webhook registrations are
installed with `clientConfig.url` instead of `clientConfig.service`.
"""

from __future__ import annotations

import base64
import copy
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import yaml

from . import components
from .components import LOOPBACK, Addresses, Component, Layout, Ports
from .config import BinDir
from .kubeapi import Api

NAME = "lws-controller"
CRD_TIMEOUT_SECONDS = 30.0
# The namePrefix LWS' own kustomization gives these objects.
NAME_PREFIX = "lws-"
WEBHOOK_API = "/apis/admissionregistration.k8s.io/v1"
PATCH_FILES = {
    "MutatingWebhookConfiguration": "mutating-patch.yaml",
    "ValidatingWebhookConfiguration": "validating-patch.yaml",
}


def manifests_dir(bins: BinDir) -> Path:
    return bins.path / "lws"


def _api(lay: Layout, ports: Ports, addrs: Addresses) -> Api:
    return Api(components.apiserver_url(addrs, ports), lay.pki)


def _write_config(lay: Layout, ports: Ports) -> Path:
    certs = lay.lws_dir / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    # controller-runtime's webhook server looks for these file names.
    shutil.copyfile(lay.pki.webhook_cert, certs / "tls.crt")
    shutil.copyfile(lay.pki.webhook_key, certs / "tls.key")
    config = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": LOOPBACK, "port": ports.lws_webhook, "certDir": str(certs)},
        "health": {"healthProbeBindAddress": f"{LOOPBACK}:{ports.lws_health}"},
        "metrics": {"bindAddress": "0"},  # "0" disables the metrics server
    }
    path = lay.lws_dir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _is_established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def install_crds(api: Api, crd_dir: Path) -> list[str]:
    """Create the CRDs and wait until they are served (the controller's
    informers fail at start-up otherwise)."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    names = []
    for file in sorted(crd_dir.glob("*.yaml")):
        crd = yaml.safe_load(file.read_text())
        api.create(path, crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + CRD_TIMEOUT_SECONDS
    for name in names:
        while not _is_established(api.get(f"{path}/{name}")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {CRD_TIMEOUT_SECONDS:.0f}s")
            time.sleep(0.2)
    return names


def _apply_replace_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    # The released patches only replace whole webhooks (/webhooks/<i>); refuse
    # anything else rather than mis-apply it.
    for op in ops:
        parts = op["path"].strip("/").split("/")
        if op["op"] != "replace" or len(parts) != 2 or parts[0] != "webhooks":
            raise ValueError(f"unsupported patch operation in LWS manifests: {op}")
        obj["webhooks"][int(parts[1])] = op["value"]


def webhook_configurations(mdir: Path, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The released registrations, patched as LWS' kustomization does, with
    each Service reference replaced by the loopback URL of the same path."""
    result = []
    for doc in yaml.safe_load_all((mdir / "manifests.yaml").read_text()):
        if not doc:
            continue
        obj = copy.deepcopy(doc)
        _apply_replace_patch(obj, yaml.safe_load((mdir / PATCH_FILES[obj["kind"]]).read_text()))
        obj["metadata"]["name"] = NAME_PREFIX + obj["metadata"]["name"]
        for hook in obj["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://{LOOPBACK}:{port}{path}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            }
        result.append(obj)
    return result


def register_webhooks(api: Api, configs: list[dict[str, Any]]) -> None:
    for obj in configs:
        plural = obj["kind"].lower() + "s"
        api.create(f"{WEBHOOK_API}/{plural}", obj)


def _serving(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=1):
            return True
    except OSError:
        return False


def component(bins: BinDir, lay: Layout, ports: Ports, addrs: Addresses) -> Component:
    config = lay.lws_dir / "config.yaml"
    mdir = manifests_dir(bins)
    argv = [
        str(bins.binary(NAME)),
        f"--kubeconfig={lay.component_kubeconfig('lws')}",
        f"--config={config}",
    ]

    def prepare() -> None:
        _write_config(lay, ports)
        install_crds(_api(lay, ports, addrs), mdir / "crds")

    def ready() -> bool:
        health = components.fetch_ok(f"http://{LOOPBACK}:{ports.lws_health}/readyz")
        return health and _serving(ports.lws_webhook)

    def finish() -> None:
        configs = webhook_configurations(mdir, ports.lws_webhook, lay.pki.ca_cert.read_bytes())
        register_webhooks(_api(lay, ports, addrs), configs)

    return Component(NAME, argv, ready, 60, prepare=prepare, finish=finish)
