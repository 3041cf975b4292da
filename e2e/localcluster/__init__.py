"""A real Kubernetes control plane run as local processes, with kwok fake GPU nodes.

Binaries come from ``e2e/controlplane/build.sh``; ``python -m e2e.localcluster``
starts and stops them. See docs/testing.md, section "Local control plane".
"""
