"""Where the scaler's numbers come from: the engines' own /metrics (`direct`) or Prometheus (`prometheus`), both
behind `MetricsSource`, both giving the pure policy an `Observation`.

The shell of the scaler, beside `reconcile`: `direct` and `prometheus` do network I/O. `pods`, `promtext` and
`window` are pure (pod objects or page text in, numbers out) and tested as such.
"""

from .direct import DirectSource
from .pods import PoolPods, pool_pods
from .prometheus import PrometheusSource
from .source import MetricsSource

__all__ = ["DirectSource", "MetricsSource", "PoolPods", "PrometheusSource", "pool_pods"]
