"""Container images built here without a registry: a private Docker Engine, a Debian-made stand-in for the one base
image the Dockerfiles name, input-keyed builds, and export into a containerd (see docs/testing.md, "Images")."""
