"""What kube-apiserver refuses in the objects the operator renders, checked on the rendered objects (D72, D78).

Written from pkg/apis/core/validation and apps/validation (Kubernetes 1.37) independently of the operator's own
`api/kube_syntax.py` and `api/object_rules.py`, which check the spec: this module checks what comes out, so a rule
the spec side lacks (or a renderer that builds something else) shows up as a violation here. The real API server
is the judge of last resort: e2e/test_apiserver_rules.py dry-runs a sample of the same objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_PORT_NAME = re.compile(r"[-a-z0-9]+")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_QUANTITY = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?")
_SUFFIX = {
    "": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6, "G": 10**9,
    "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
    "Ei": 2**60,
}  # fmt: skip
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage"}
ANNOTATIONS_LIMIT = 256 * 1024
CONFIGMAP_LIMIT = 1024 * 1024


def quantity(text: Any) -> Decimal | None:
    text = str(text)
    if not _QUANTITY.fullmatch(text):
        return None
    number = re.match(r"[+-]?(\d+\.?\d*|\.\d+)", text)
    assert number is not None
    suffix = text[number.end() :]
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(text)
        return Decimal(number.group(0)) * Decimal(_SUFFIX[suffix])
    except (InvalidOperation, KeyError):
        return None


def qualified_name_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "more than one /"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return "bad prefix"
    if not name or len(name) > 63 or not _NAME.fullmatch(name):
        return "bad name"
    return None


def _metadata(obj: dict[str, Any], where: str) -> Iterator[str]:
    for key, value in (obj.get("labels") or {}).items():
        if qualified_name_error(key):
            yield f"{where}.labels: key {key!r}"
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            yield f"{where}.labels[{key}]: value {value!r}"
    annotations = obj.get("annotations") or {}
    for key in annotations:
        if qualified_name_error(key.lower()):
            yield f"{where}.annotations: key {key!r}"
    if sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items()) > ANNOTATIONS_LIMIT:
        yield f"{where}.annotations: above 256 KiB"


def _resources(resources: dict[str, Any], where: str) -> Iterator[str]:
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    for side, entries in (("requests", requests), ("limits", limits)):
        for name, amount in entries.items():
            value = quantity(amount)
            if value is None:
                yield f"{where}.{side}.{name}: quantity {amount!r}"
                continue
            if value < 0:
                yield f"{where}.{side}.{name}: negative"
            standard = name in STANDARD_RESOURCES or name.startswith("hugepages-")
            if not standard:
                if "/" not in name or qualified_name_error(name) or name.startswith("kubernetes.io/"):
                    yield f"{where}.{side}.{name}: not a resource a container may request"
                elif value % 1:
                    yield f"{where}.{side}.{name}: extended resources are whole"
            if name.startswith("hugepages-"):
                size = quantity(name.removeprefix("hugepages-"))
                if size is None or size <= 0 or value % size:
                    yield f"{where}.{side}.{name}: not a whole number of pages"
    for name, amount in requests.items():
        request, limit = quantity(amount), quantity(limits.get(name, amount))
        fixed = name.startswith("hugepages-") or name not in STANDARD_RESOURCES
        if fixed and name not in limits:
            yield f"{where}.limits.{name}: required with a request"
        elif fixed and request != limit:
            yield f"{where}.requests.{name}: must equal the limit"
        elif request is not None and limit is not None and request > limit:
            yield f"{where}.requests.{name}: above the limit"
    names = set(requests) | set(limits)
    if any(n.startswith("hugepages-") for n in names) and not names & {"cpu", "memory"}:
        yield f"{where}: huge pages need a cpu or memory request or limit"


def _container(container: dict[str, Any], volumes: set[str], where: str) -> Iterator[str]:
    name = container.get("name", "")
    if len(name) > 63 or not _DNS_LABEL.fullmatch(name):
        yield f"{where}.name {name!r}"
    if not container.get("image"):
        yield f"{where}.image: required"
    seen_env: set[str] = set()
    for var in container.get("env") or []:
        var_name = var.get("name", "")
        if not var_name or "=" in var_name or any(ord(c) < 32 or ord(c) > 126 for c in var_name):
            yield f"{where}.env {var_name!r}: not a valid name"
        if var_name in seen_env:
            yield f"{where}.env {var_name!r}: given twice"
        seen_env.add(var_name)
        source = var.get("valueFrom")
        if source is not None:
            if "value" in var:
                yield f"{where}.env {var_name}: value and valueFrom"
            if len(source) != 1:
                yield f"{where}.env {var_name}: valueFrom needs exactly one source"
            for ref in ("secretKeyRef", "configMapKeyRef"):
                key = (source.get(ref) or {}).get("key")
                if key is not None and (len(key) > 253 or not _CONFIG_KEY.fullmatch(key)):
                    yield f"{where}.env {var_name}: {ref}.key {key!r}"
    ports: set[tuple[int, str]] = set()
    for port in container.get("ports") or []:
        number = port.get("containerPort")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            yield f"{where}.ports: containerPort {number!r}"
        key = (number, port.get("protocol", "TCP"))
        if key in ports:
            yield f"{where}.ports: {number}/{key[1]} twice"
        ports.add(key)
    mounts: set[str] = set()
    for mount in container.get("volumeMounts") or []:
        if mount.get("name") not in volumes:
            yield f"{where}.volumeMounts: {mount.get('name')!r} names no volume"
        path = mount.get("mountPath", "")
        if not path or path in mounts:
            yield f"{where}.volumeMounts: mountPath {path!r} empty or twice"
        mounts.add(path)
        sub = mount.get("subPath")
        if sub is not None and (sub.startswith("/") or ".." in sub.split("/")):
            yield f"{where}.volumeMounts: subPath {sub!r}"
    yield from _resources(container.get("resources") or {}, f"{where}.resources")


def _probes(container: dict[str, Any], names: set[str], where: str) -> Iterator[str]:
    for probe_kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container.get(probe_kind)
        if probe is None:
            continue
        for handler in ("httpGet", "tcpSocket", "grpc"):
            port = (probe.get(handler) or {}).get("port")
            if isinstance(port, str) and port not in names:
                yield f"{where}.{probe_kind}: port {port!r} is not declared"
            if isinstance(port, int) and not 1 <= port <= 65535:
                yield f"{where}.{probe_kind}: port {port}"


def _toleration(toleration: dict[str, Any], where: str) -> Iterator[str]:
    key = toleration.get("key", "")
    operator = toleration.get("operator", "Equal")
    if key and qualified_name_error(key):
        yield f"{where}: key {key!r}"
    if not key and operator != "Exists":
        yield f"{where}: an empty key needs operator Exists"
    if operator == "Exists" and toleration.get("value"):
        yield f"{where}: a value with operator Exists"
    if (
        operator == "Equal"
        and toleration.get("value")
        and (len(toleration["value"]) > 63 or not _LABEL_VALUE.fullmatch(toleration["value"]))
    ):
        yield f"{where}: value {toleration['value']!r}"
    if toleration.get("tolerationSeconds") is not None and toleration.get("effect") != "NoExecute":
        yield f"{where}: tolerationSeconds needs effect NoExecute"


def _host_ports(containers: list[dict[str, Any]], host_network: bool, where: str) -> Iterator[str]:
    """On the host network a port's hostPort defaults to its containerPort and must equal it; a host port (with
    its protocol and address) is taken once among a pod's containers."""
    taken: set[tuple[Any, str, str]] = set()
    for index, container in enumerate(containers):
        for port in container.get("ports") or []:
            host_port = port.get("hostPort", port.get("containerPort") if host_network else 0)
            if host_network and host_port != port.get("containerPort"):
                yield f"{where}[{index}].ports: hostPort {host_port} is not its containerPort on the host network"
            if host_port:
                key = (host_port, port.get("protocol", "TCP"), port.get("hostIP", ""))
                if key in taken:
                    yield f"{where}[{index}].ports: host port {host_port}/{key[1]} twice in the pod"
                taken.add(key)


def pod_spec_violations(pod: dict[str, Any], labels: dict[str, Any], where: str) -> Iterator[str]:
    yield from _metadata({"labels": labels}, f"{where}.metadata")
    volumes: set[str] = set()
    for volume in pod.get("volumes") or []:
        name = volume.get("name", "")
        if name in volumes or len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            yield f"{where}.volumes: {name!r} invalid or twice"
        volumes.add(name)
        path = (volume.get("hostPath") or {}).get("path")
        if path is not None and ".." in path.split("/"):
            yield f"{where}.volumes[{name}].hostPath: '..'"
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    if not pod.get("containers"):
        yield f"{where}.containers: required"
    port_names: set[str] = set()
    container_names: set[str] = set()
    for index, container in enumerate(containers):
        at = f"{where}.containers[{index}]"
        if container.get("name") in container_names:
            yield f"{at}: name given twice"
        container_names.add(container.get("name", ""))
        yield from _container(container, volumes, at)
        names: set[str] = set()
        for port in container.get("ports") or []:
            name = port.get("name")
            if name is None:
                continue
            if (
                len(name) > 15
                or not _PORT_NAME.fullmatch(name)
                or not re.search("[a-z]", name)
                or "--" in name
                or name.startswith("-")
                or name.endswith("-")
            ):
                yield f"{at}.ports: name {name!r}"
            if name in port_names:
                yield f"{at}.ports: name {name!r} twice in the pod"
            port_names.add(name)
            names.add(name)
        yield from _probes(container, names, at)
    for group in ("initContainers", "containers"):
        yield from _host_ports(pod.get(group) or [], bool(pod.get("hostNetwork")), f"{where}.{group}")
    for index, toleration in enumerate(pod.get("tolerations") or []):
        yield from _toleration(toleration, f"{where}.tolerations[{index}]")
    for key, value in (pod.get("nodeSelector") or {}).items():
        if qualified_name_error(key) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            yield f"{where}.nodeSelector[{key}]"
    account = pod.get("serviceAccountName")
    if account is not None and not _DNS_SUBDOMAIN.fullmatch(account):
        yield f"{where}.serviceAccountName {account!r}"


def _count_or_percent(value: Any, replicas: int) -> int | None:
    if isinstance(value, int):
        return value if value >= 0 else None
    found = re.fullmatch(r"([0-9]+)%", str(value))
    return None if found is None else int(found.group(1))


def object_violations(obj: dict[str, Any]) -> Iterator[str]:
    """Everything about one rendered object that kube-apiserver would refuse (as far as this module knows)."""
    kind = obj.get("kind", "")
    metadata = obj.get("metadata") or {}
    name = metadata.get("name", "")
    where = f"{kind}/{name}"
    if kind == "Service":
        if len(name) > 63 or not _DNS_1035.fullmatch(name):
            yield f"{where}: not a DNS-1035 label"
    elif len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        yield f"{where}: not a DNS subdomain"
    yield from _metadata(metadata, f"{where}.metadata")
    spec = obj.get("spec") or {}
    if kind in ("Deployment", "DaemonSet"):
        template = spec.get("template") or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            yield f"{where}: the selector does not match the template's labels"
        yield from _metadata(template.get("metadata") or {}, f"{where}.template.metadata")
        yield from pod_spec_violations(template.get("spec") or {}, labels, f"{where}.template.spec")
        strategy = spec.get("strategy" if kind == "Deployment" else "updateStrategy") or {}
        rolling = strategy.get("rollingUpdate")
        defaults = ("25%", "25%") if kind == "Deployment" else (0, 1)  # DaemonSet: maxSurge 0, maxUnavailable 1
        if rolling is not None:
            surge = _count_or_percent(rolling.get("maxSurge", defaults[0]), spec.get("replicas", 1))
            unavailable = _count_or_percent(rolling.get("maxUnavailable", defaults[1]), spec.get("replicas", 1))
            if surge is None or unavailable is None:
                yield f"{where}.strategy: not a count or percentage"
            elif surge == 0 and unavailable == 0:
                yield f"{where}.strategy: maxSurge and maxUnavailable both 0"
            elif isinstance(rolling.get("maxUnavailable"), str) and unavailable > 100:
                yield f"{where}.strategy: maxUnavailable above 100%"
    elif kind == "LeaderWorkerSet":
        template = spec.get("leaderWorkerTemplate") or {}
        for part in ("leaderTemplate", "workerTemplate"):
            if part in template:
                pod = template[part]
                labels = (pod.get("metadata") or {}).get("labels") or {}
                yield from _metadata(pod.get("metadata") or {}, f"{where}.{part}.metadata")
                yield from pod_spec_violations(pod.get("spec") or {}, labels, f"{where}.{part}.spec")
    elif kind == "Service":
        seen: set[tuple[int, str]] = set()
        names: set[str] = set()
        ports = spec.get("ports") or []
        for port in ports:
            key = (port.get("port"), port.get("protocol", "TCP"))
            if key in seen or not isinstance(key[0], int) or not 1 <= key[0] <= 65535:
                yield f"{where}.ports: {key} invalid or twice"
            seen.add(key)
            port_name = port.get("name")
            if len(ports) > 1 and not port_name:
                yield f"{where}.ports: a name is required with several ports"
            if port_name in names:
                yield f"{where}.ports: name {port_name!r} twice"
            names.add(port_name)
            target = port.get("targetPort")
            if isinstance(target, int) and not 1 <= target <= 65535:
                yield f"{where}.ports: targetPort {target}"
        for key, value in (spec.get("selector") or {}).items():
            if qualified_name_error(key) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
                yield f"{where}.selector[{key}]"
    elif kind == "ConfigMap":
        data = obj.get("data") or {}
        for key in data:
            if len(key) > 253 or not _CONFIG_KEY.fullmatch(key):
                yield f"{where}.data: key {key!r}"
        if sum(len(k) + len(v.encode()) for k, v in data.items()) > CONFIGMAP_LIMIT:
            yield f"{where}.data: above 1 MiB"
