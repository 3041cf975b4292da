"""The stand-in for `python:3.11-slim-bookworm`, made from Debian's packages because nothing can be pulled here.

Every `FROM` in the repository names that official image, so users build exactly these Dockerfiles; the harness
imports a root filesystem under the same name into its private dockerd. It is made to behave as the official
image does where the Dockerfiles depend on it:
- `python`, `python3` in /usr/local/bin (Debian's CPython 3.11, the bookworm interpreter the official 3.11 images
  also track), `python -m venv` works (python3-venv);
- `pip`, `setuptools` and `wheel` are installed *by pip* into /usr/local from Debian's own wheels, with no
  EXTERNALLY-MANAGED marker, so `pip install` as root works and `pip uninstall pip setuptools wheel` (the operator
  image's final stage) can remove them, as in the official image. Debian's python3-pip package could do neither.
- LANG=C.UTF-8, CMD python3.
One harness detail has no counterpart in the official image: this machine's TLS goes through an intercepting proxy,
so the host's CA bundle replaces Debian's and PIP_CERT / SSL_CERT_FILE / REQUESTS_CA_BUNDLE point at it. Images
built from the stand-in inherit that bundle and those variables (pointing at the system bundle's usual path).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .dockerd import Dockerd, DockerdError
from .pipes import pipe

BASE_REF = "python:3.11-slim-bookworm"
# The same image under a tag that names its recipe, so a changed recipe or CA bundle is never mistaken for it.
BASE_KEY_REPOSITORY = "disagg-harness/python-3.11-slim-bookworm"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# libpython3.11-dev: the official image ships the C headers, and torch.compile builds kernels that include them.
PACKAGES = ("python3", "python3-venv", "python3-wheel-whl", "libpython3.11-dev", "ca-certificates", "netbase", "tzdata")
# Like the official slim images: no documentation, manual pages or translations.
DPKG_OPTIONS = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
)
# Run inside the new root file system ("$1"); see the module docstring for why each exists.
CUSTOMIZE_HOOKS = (
    'rm -f "$1"/usr/lib/python3.*/EXTERNALLY-MANAGED',
    'chroot "$1" sh -c \'set -- /usr/share/python-wheels/pip-*.whl && python3 "$1/pip" install --quiet --no-index '
    "--no-cache-dir --disable-pip-version-check --find-links /usr/share/python-wheels pip setuptools wheel'",
    'ln -sf /usr/bin/python3 "$1"/usr/local/bin/python3 && ln -sf /usr/bin/python3 "$1"/usr/local/bin/python',
    f'cp {HOST_CA_BUNDLE} "$1"/etc/ssl/certs/ca-certificates.crt',
    'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/root/.cache',
)
IMAGE_ENV = {
    "PATH": "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
    "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
    "REQUESTS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
}
# mmdebstrap's hooks run with this environment, not the caller's (the host's PIP_* settings must not leak in).
CHROOT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LC_ALL": "C.UTF-8",
    "HOME": "/root",
}
# Bumped when the recipe changes in a way the fields above do not show.
RECIPE_VERSION = "1"


@dataclass(frozen=True)
class BaseRecipe:
    suite: str = SUITE
    mirrors: tuple[str, ...] = MIRRORS
    packages: tuple[str, ...] = PACKAGES
    dpkg_options: tuple[str, ...] = DPKG_OPTIONS
    hooks: tuple[str, ...] = CUSTOMIZE_HOOKS
    env: tuple[tuple[str, str], ...] = tuple(sorted(IMAGE_ENV.items()))

    def key(self, ca_bundle: bytes) -> str:
        """Hash of everything that goes into the base image, the host's CA bundle included."""
        recipe = json.dumps(
            {
                "version": RECIPE_VERSION,
                "suite": self.suite,
                "mirrors": self.mirrors,
                "packages": self.packages,
                "dpkg": self.dpkg_options,
                "hooks": self.hooks,
                "env": self.env,
                "ca": hashlib.sha256(ca_bundle).hexdigest(),
            },
            sort_keys=True,
        )
        return hashlib.sha256(recipe.encode()).hexdigest()

    def mmdebstrap_argv(self) -> list[str]:
        argv = ["mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar", "--quiet"]
        argv += [f"--include={','.join(self.packages)}"]
        argv += [f"--dpkgopt={option}" for option in self.dpkg_options]
        argv += ['--aptopt=Apt::Install-Recommends "false"']
        argv += [f"--customize-hook={hook}" for hook in self.hooks]
        return [*argv, self.suite, "-", *self.mirrors]

    def import_argv(self, ref: str, key: str) -> list[str]:
        changes = [f"ENV {name}={value}" for name, value in self.env]
        changes.append('CMD ["python3"]')
        argv = ["import", "--message", f"disagg-operator harness stand-in for {ref}, recipe {key[:16]}"]
        for change in changes:
            argv += ["--change", change]
        return [*argv, "-", ref]


def key_ref(key: str) -> str:
    return f"{BASE_KEY_REPOSITORY}:{key[:32]}"


def image_id(docker: Dockerd, ref: str) -> str | None:
    proc = docker.run(["image", "inspect", "--format", "{{.Id}}", ref], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_base(
    docker: Dockerd,
    recipe: BaseRecipe | None = None,
    log: Path | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> str:
    """Make sure BASE_REF is the stand-in of the current recipe; build it if not. Returns its image id."""
    recipe = recipe or BaseRecipe()
    key = recipe.key(HOST_CA_BUNDLE.read_bytes())
    keyed = key_ref(key)
    existing = image_id(docker, keyed)
    if existing is not None:
        if image_id(docker, BASE_REF) != existing:
            docker.run(["tag", keyed, BASE_REF])
        say(f"base: {BASE_REF} ({keyed}) is up to date")
        return existing
    if shutil.which("mmdebstrap") is None:
        raise DockerdError("mmdebstrap not found; install it from Debian: apt-get install mmdebstrap")
    # Imported under a scratch name first: `docker import` accepts a tar cut short by a failed mmdebstrap, and
    # only a complete, smoke-tested image may get the names that mark it reusable.
    scratch = f"{keyed}-incomplete"
    started = time.monotonic()
    say(f"base: making {BASE_REF} from Debian's packages with mmdebstrap (log: {log})")
    try:
        pipe(
            recipe.mmdebstrap_argv(),
            docker.command(recipe.import_argv(scratch, key)),
            env=CHROOT_ENV,
            consumer_env=docker.env,
            log=log,
        )
        _smoke_test(docker, scratch)
    except BaseException:
        docker.run(["rmi", "--force", scratch], check=False)
        raise
    docker.run(["tag", scratch, keyed])
    docker.run(["tag", scratch, BASE_REF])
    docker.run(["rmi", scratch])
    built = image_id(docker, keyed)
    if built is None:
        raise DockerdError(f"{keyed} vanished right after it was tagged")
    _drop_other_keys(docker, keyed)
    say(f"base: made {keyed} in {time.monotonic() - started:.0f} s")
    return built


def _drop_other_keys(docker: Dockerd, keep: str) -> None:
    """Untag stand-ins of older recipes; images built on them keep their layers until they go too."""
    listed = docker.run(["images", BASE_KEY_REPOSITORY, "--format", "{{.Repository}}:{{.Tag}}"]).stdout.split()
    stale = [ref for ref in listed if ref != keep]
    if stale:
        docker.run(["rmi", *stale], check=False)


def _smoke_test(docker: Dockerd, ref: str) -> None:
    """The properties the repository's Dockerfiles rely on; a base without them fails here, not mid-build."""
    script = (
        "set -e; python --version; python3 -c 'import ensurepip, venv, ssl'; pip --version; "
        "python -m venv /tmp/v && /tmp/v/bin/pip --version; "
        "useradd --help >/dev/null; groupadd --help >/dev/null"
    )
    proc = docker.run(["run", "--rm", "--network", "none", ref, "sh", "-c", script], check=False, timeout=120)
    if proc.returncode != 0:
        raise DockerdError(f"the stand-in base image fails its smoke test: {proc.stdout}{proc.stderr}")


def base_key() -> str:
    return BaseRecipe().key(HOST_CA_BUNDLE.read_bytes())
