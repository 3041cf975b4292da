"""Autoscaling of the prefill and decode pools: typed metrics snapshots and the pure policy.

Both are pure. What fills the snapshots (scraping, Prometheus) is `disagg.metrics_sources`; what calls the policy
and patches replicas is `disagg.reconcile.autoscale`.
"""
