"""`spec.scaling`: SLO targets and limits from which the operator sizes pools with autoscaling enabled."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import ApiModel
from .cel import CelRule, with_cel
from .types import Duration


class PrometheusSource(ApiModel):
    url: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^https?://")] = Field(
        description="Base URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090."
    )
    window: Duration = Field(
        default="1m",
        description="Range of the rate() and histogram windows in the queries. Keep it at least twice Prometheus's "
        "scrape interval for the engines.",
    )


class MetricsSource(ApiModel):
    """Where engine metrics come from."""

    model_config = with_cel(
        CelRule(
            rule="(self.source == 'prometheus') == has(self.prometheus)",
            message="spec.scaling.metrics.prometheus must be set exactly when source is prometheus: add "
            "prometheus.url or change source",
        )
    )

    source: Literal["direct", "prometheus"] = Field(
        default="direct",
        description="direct: the operator scrapes each engine pod's /metrics. prometheus: it queries Prometheus.",
    )
    prometheus: PrometheusSource | None = Field(default=None, description="Prometheus settings (source prometheus).")


class SloTargets(ApiModel):
    """Latency targets at the 90th percentile."""

    ttft_p90: Duration | None = Field(
        default=None, description="Time-to-first-token target, e.g. 2s. Sizes the prefill pool."
    )
    itl_p90: Duration | None = Field(
        default=None, description="Inter-token-latency target, e.g. 50ms. Sizes the decode pool."
    )


class ScaleBehavior(ApiModel):
    stabilization_window: Duration | None = Field(
        default=None,
        description="How long a recommendation must persist before acting on it. Defaults: 0s up, 5m down.",
    )
    max_step: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        default=None, description="Most replicas added or removed per step. Defaults: 4 up, 1 down."
    )


class RatioBounds(ApiModel):
    """Bounds on prefill replicas divided by decode replicas."""

    model_config = with_cel(
        CelRule(
            rule="!has(self.min) || !has(self.max) || self.min <= self.max",
            message="spec.scaling.ratio.min must not exceed ratio.max: swap or widen them",
        )
    )

    min: Annotated[float, Field(ge=0, le=1000)] | None = Field(default=None, description="Lowest P:D ratio.")
    max: Annotated[float, Field(gt=0, le=1000)] | None = Field(default=None, description="Highest P:D ratio.")


class ScalingSpec(ApiModel):
    """How pools with autoscaling enabled are sized."""

    metrics: MetricsSource = Field(default_factory=MetricsSource, description="Metrics source.")
    interval: Duration = Field(default="30s", description="How often the scaler evaluates.")
    slo: SloTargets = Field(default_factory=SloTargets, description="Latency targets.")
    scale_up: ScaleBehavior = Field(default_factory=ScaleBehavior, description="Scale-up behaviour.")
    scale_down: ScaleBehavior = Field(default_factory=ScaleBehavior, description="Scale-down behaviour.")
    max_gpus: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        default=None, description="GPU budget across both pools; the scaler never exceeds it."
    )
    ratio: RatioBounds = Field(default_factory=RatioBounds, description="Prefill:decode replica ratio bounds.")
