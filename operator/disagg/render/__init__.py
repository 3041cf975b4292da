"""Place plan values into Kubernetes object shapes (Jinja2 templates), in a stable order."""

from .renderer import KIND_ORDER, render_deployment, render_plan

__all__ = ["KIND_ORDER", "render_deployment", "render_plan"]
