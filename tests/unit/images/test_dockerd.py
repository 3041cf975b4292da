"""The private dockerd's command line and client environment keep it apart from the host and any system dockerd."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e.images.dockerd import DockerdError, DockerdPaths, check_paths, client_env, dockerd_argv


def flags(argv: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in argv[1:])


def test_every_path_the_daemon_writes_is_under_its_root(tmp_path: Path) -> None:
    paths = DockerdPaths(tmp_path / "docker")
    got = flags(dockerd_argv(paths, "/usr/sbin/dockerd"))
    assert got["host"] == f"unix://{tmp_path}/docker/docker.sock"
    for flag in ("data-root", "exec-root", "pidfile", "config-file"):
        assert Path(got[flag]).is_relative_to(tmp_path / "docker"), flag


def test_the_daemon_never_changes_the_hosts_network() -> None:
    got = flags(dockerd_argv(DockerdPaths(Path("/c/docker"))))
    assert got["bridge"] == "none"
    for flag in ("iptables", "ip6tables", "ip-forward", "ip-masq", "userland-proxy"):
        assert got[flag] == "false", flag


def test_the_client_talks_to_our_socket_with_the_classic_builder_and_no_user_config(tmp_path: Path) -> None:
    paths = DockerdPaths(tmp_path)
    env = client_env(paths, {"PATH": "/bin", "DOCKER_HOST": "tcp://elsewhere:2375", "DOCKER_CONTEXT": "remote"})
    assert env["DOCKER_HOST"] == f"unix://{tmp_path}/docker.sock"
    assert env["DOCKER_BUILDKIT"] == "0"  # BuildKit would try to pull the `# syntax=` frontend image
    assert env["DOCKER_CONFIG"] == str(tmp_path / "client")
    assert "DOCKER_CONTEXT" not in env
    assert env["PATH"] == "/bin"


def test_a_cache_dir_too_deep_for_unix_sockets_is_refused_with_the_fix() -> None:
    check_paths(DockerdPaths(Path("/root/.cache/disagg-operator/docker")))
    with pytest.raises(DockerdError, match="DISAGG_CACHE_DIR"):
        check_paths(DockerdPaths(Path("/" + "d" * 80) / "docker"))


def test_missing_host_programs_map_to_their_debian_packages() -> None:
    from e2e.images.host import missing_packages

    programs = {"sh": "dash", "disagg-no-such-program": "some-package", "disagg-no-such-either": "some-package"}
    assert missing_packages(programs) == ["some-package"]


def test_only_mounts_under_our_root_are_unmounted_deepest_first() -> None:
    from e2e.images.dockerd import mounts_under

    mountinfo = (
        "36 25 0:31 / /c/docker/run/netns/default rw - nsfs nsfs rw\n"
        "37 25 0:32 / /c/docker/data/overlay2/x/merged rw - overlay overlay rw\n"
        "38 25 0:33 / /c/docker-other/run rw - tmpfs tmpfs rw\n"
        "39 25 0:34 / /c/docker/data rw - ext4 /dev/vda rw\n"
        "40 25 0:35 / / rw - ext4 /dev/vda rw\n"
    )
    got = mounts_under(mountinfo, Path("/c/docker"))
    assert set(got) == {"/c/docker/run/netns/default", "/c/docker/data/overlay2/x/merged", "/c/docker/data"}
    assert got[-1] == "/c/docker/data"
