"""Where the scaler's numbers come from: the engines' own /metrics (`direct`) or Prometheus (`prometheus`), both
behind `ObservationSource` (`source`), both giving the pure policy an `Observation`.

The shell of the scaler, beside `reconcile`: `direct` and `prometheus` do network I/O and are imported by name, so
that importing the pure modules (`pods`, `promtext`, `window`: pod objects or page text in, numbers out) does not
pull in an HTTP client.
"""
