"""Derive everything the cluster needs from a validated spec: names, ports, engine arguments, connector JSON,
KV-tier configuration, router arguments and resource totals. Pure functions, no I/O."""

from .build import build_plan
from .model import DeploymentPlan

__all__ = ["DeploymentPlan", "build_plan"]
