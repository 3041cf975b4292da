"""Which metrics endpoints the operator may contact: the install decides, never a spec (D76).

A DisaggDeployment's author is not trusted to make the operator fetch arbitrary URLs from inside the cluster, so a
Prometheus URL in spec.scaling.metrics is used only when the operator was installed to query it
(`disagg run --prometheus-url`, the chart's `operator.prometheusUrls`). Pure.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def normalized(url: str) -> str:
    """The form URLs are compared in: scheme and host lowercased, no trailing slash, no query or fragment."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def prometheus_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    parts = urlsplit(url)
    if parts.query or parts.fragment or parts.username or parts.password:
        return False
    return normalized(url) in {normalized(entry) for entry in allowed}


def not_allowed_message(url: str, allowed: tuple[str, ...]) -> str:
    configured = ", ".join(sorted({normalized(entry) for entry in allowed})) or "none"
    return (
        f"spec.scaling.metrics.prometheus.url {url} is not a Prometheus this operator was installed to query "
        f"(allowed: {configured}), so it is not contacted: use one of those, use source direct, or ask the "
        "cluster admin to add it (disagg run --prometheus-url; Helm value operator.prometheusUrls)"
    )
