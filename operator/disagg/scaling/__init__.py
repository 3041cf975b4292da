"""Autoscaling of the prefill and decode pools: typed metrics snapshots and the pure policy.

`snapshot` and `policy` are pure; the shell that scrapes metrics and patches replicas builds on them.
"""
