"""The shell around the pure core: kopf watches, server-side apply, pruning, status, events and metrics.

Pure helpers (status aggregation, condition transitions, prune selection, field ownership) live in their own
modules here and take no clients; the I/O is in kube.py, reconciler.py and operator.py.
"""
