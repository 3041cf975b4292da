"""The Debian-made stand-in for python:3.11-slim-bookworm: what it is made of and what its key covers."""

from __future__ import annotations

from e2e.images.base import BASE_REF, BaseRecipe, key_ref


def test_the_root_filesystem_is_a_minimal_bookworm_with_python_venv_and_no_host_state() -> None:
    argv = BaseRecipe().mmdebstrap_argv()
    assert argv[0] == "mmdebstrap" and "--variant=minbase" in argv and "--format=tar" in argv
    include = next(a for a in argv if a.startswith("--include=")).split("=", 1)[1].split(",")
    assert {"python3", "python3-venv", "ca-certificates"} <= set(include)
    assert "python3-pip" not in include  # Debian's pip could not be uninstalled by the operator image's last stage
    suite_at = argv.index("bookworm")
    assert argv[suite_at + 1] == "-"  # the tarball goes to stdout, straight into docker import
    assert all(m.startswith("deb http://deb.debian.org/") for m in argv[suite_at + 2 :])
    hooks = " ".join(a for a in argv if a.startswith("--customize-hook="))
    assert "EXTERNALLY-MANAGED" in hooks and "/usr/local/bin/python" in hooks
    assert "/etc/ssl/certs/ca-certificates.crt" in hooks


def test_the_import_sets_the_official_images_environment_and_the_ca_variables() -> None:
    argv = BaseRecipe().import_argv(BASE_REF, "k" * 64)
    changes = [argv[i + 1] for i, a in enumerate(argv) if a == "--change"]
    assert "ENV LANG=C.UTF-8" in changes
    assert any(c.startswith("ENV PATH=/usr/local/bin:") for c in changes)
    for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        assert f"ENV {name}=/etc/ssl/certs/ca-certificates.crt" in changes
    assert 'CMD ["python3"]' in changes
    assert argv[-2:] == ["-", BASE_REF]


def test_the_key_covers_the_recipe_and_the_hosts_ca_bundle() -> None:
    recipe = BaseRecipe()
    assert recipe.key(b"ca") == recipe.key(b"ca")
    assert recipe.key(b"ca") != recipe.key(b"other ca")
    assert BaseRecipe(packages=(*recipe.packages, "curl")).key(b"ca") != recipe.key(b"ca")
    assert key_ref(recipe.key(b"ca")).startswith("disagg-harness/python-3.11-slim-bookworm:")
