"""Where the scaler's numbers come from: the engines' own /metrics, or Prometheus. Both give an Observation."""

from .base import PoolPods, pool_pods
from .direct import DirectSource
from .prometheus import PrometheusSource

__all__ = ["DirectSource", "PoolPods", "PrometheusSource", "pool_pods"]
