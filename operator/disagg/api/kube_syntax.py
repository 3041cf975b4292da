"""The syntax kube-apiserver checks on names, labels, ports, keys, paths and resource names (D72).

Each function returns why a value is refused, in the API server's terms, or None. They mirror
k8s.io/apimachinery/pkg/util/validation and pkg/apis/core/validation as kube-apiserver 1.37 applies them to the
objects the operator renders; e2e/test_apiserver_rules.py holds the rendered side to a real API server.
"""

from __future__ import annotations

import re
from decimal import Decimal

from .units import UnitError, parse_quantity

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_PORT_NAME = re.compile(r"[-a-z0-9]+")
_HUGEPAGES = re.compile(r"hugepages-(.+)")

ANNOTATIONS_TOTAL_BYTES = 256 * 1024
"""The API server's one limit on annotations: keys and values of one object together (TotalAnnotationSizeLimitB)."""
CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
"""Standard resources a container may request, besides hugepages-<size> and extended resources."""


def dns_label_error(name: str) -> str | None:
    if len(name) > 63:
        return "must be no more than 63 characters"
    if not _DNS_LABEL.fullmatch(name):
        return "must consist of lower case alphanumeric characters or '-', and start and end with one of them"
    return None


def dns_subdomain_error(name: str) -> str | None:
    if len(name) > 253:
        return "must be no more than 253 characters"
    if not _DNS_SUBDOMAIN.fullmatch(name):
        return "must be lower case alphanumeric characters, '-' or '.', starting and ending with an alphanumeric"
    return None


def qualified_name_error(name: str) -> str | None:
    """Label and annotation keys, taint and topology keys: an optional DNS-subdomain prefix and '/', then a name of
    at most 63 characters."""
    prefix, slash, part = name.rpartition("/")
    if slash:
        if not prefix:
            return "has an empty prefix before '/'"
        problem = dns_subdomain_error(prefix)
        if problem is not None:
            return f"has a prefix that {problem}"
    if not part:
        return "has an empty name part"
    if len(part) > 63:
        return "has a name part longer than 63 characters"
    if not _NAME_PART.fullmatch(part):
        return "has a name part that is not alphanumeric characters, '-', '_' or '.' starting and ending alphanumeric"
    return None


def label_value_error(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _LABEL_VALUE.fullmatch(value):
        return "must be empty, or alphanumeric characters, '-', '_' or '.' starting and ending with an alphanumeric"
    return None


def annotations_size(annotations: dict[str, str]) -> int:
    return sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())


def port_name_error(name: str) -> str | None:
    """An IANA service name: what container ports and named target ports must be."""
    if len(name) > 15:
        return "must be no more than 15 characters"
    if not _PORT_NAME.fullmatch(name):
        return "must contain only lower case letters, digits and '-'"
    if "--" in name:
        return "must not contain consecutive hyphens"
    if name.startswith("-") or name.endswith("-"):
        return "must not begin or end with a hyphen"
    if not re.search(r"[a-z]", name):
        return "must contain at least one letter"
    return None


def config_key_error(key: str) -> str | None:
    """Keys of Secrets and ConfigMaps."""
    if len(key) > 253:
        return "must be no more than 253 characters"
    if not _CONFIG_KEY.fullmatch(key):
        return "must consist of alphanumeric characters, '-', '_' or '.'"
    if key in (".", ".."):
        return f"must not be {key!r}"
    return None


def env_name_error(name: str) -> str | None:
    if not name or any(not (32 <= ord(char) <= 126) or char == "=" for char in name):
        return "must consist only of printable ASCII characters other than '='"
    return None


def backstep_error(path: str) -> str | None:
    """Host paths: no '..' element."""
    return "must not contain '..'" if ".." in path.split("/") else None


def sub_path_error(path: str) -> str | None:
    """Volume subPaths: relative, and never stepping out of the volume."""
    if path.startswith("/"):
        return "must be a relative path"
    return backstep_error(path)


def hugepage_size(name: str) -> Decimal | None:
    """The page size a `hugepages-<size>` resource name names, or None for any other name."""
    match = _HUGEPAGES.fullmatch(name)
    if match is None:
        return None
    try:
        size = parse_quantity(match.group(1))
    except UnitError:
        return None
    return size if size > 0 else None


def is_extended_resource(name: str) -> bool:
    """A resource outside the kubernetes.io domain, e.g. nvidia.com/gpu: whole numbers only, never overcommitted."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def container_resource_error(name: str) -> str | None:
    """Names a container may request: cpu, memory, ephemeral-storage, hugepages-<size>, or an extended resource."""
    if name in CONTAINER_RESOURCES or hugepage_size(name) is not None:
        return None
    if "/" not in name:
        return (
            "is not a standard container resource (cpu, memory, ephemeral-storage, hugepages-<size>) nor a "
            "domain-qualified extended resource such as nvidia.com/gpu"
        )
    problem = qualified_name_error(name)
    if problem is not None:
        return problem
    if not is_extended_resource(name):
        return "is in the kubernetes.io domain, which has no container resources but the standard ones"
    if name.startswith("requests."):
        return "must not start with 'requests.'"
    return None


def extended_resource_error(name: str) -> str | None:
    """What `gpuResourceName` and `rdma.resourceName` must be: an extended resource."""
    problem = container_resource_error(name)
    if problem is not None:
        return problem
    if not is_extended_resource(name):
        return "is a standard resource, not an extended one"
    return None
