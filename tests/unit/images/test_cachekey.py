"""Cache keys: any input change gives a new key, and nothing that is not an input does."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e.images.build import read_inputs
from e2e.images.cachekey import FileInput, cache_key, file_input, is_keyed_tag_of, keyed_tag
from e2e.images.specs import ImageSpec

FILES = (file_input("a.txt", b"alpha", 0o644), file_input("bin/run.sh", b"#!/bin/sh", 0o755))
BASE = {"dockerfile": b"FROM x\n", "dockerignore": b"", "build_args": {"V": "1"}, "base_ids": ["sha256:base"]}


def key(files: tuple[FileInput, ...] = FILES, **changes: object) -> str:
    return cache_key(files=files, **{**BASE, **changes})  # type: ignore[arg-type]


def test_the_key_is_deterministic_and_independent_of_listing_order() -> None:
    assert key() == key(files=tuple(reversed(FILES)))
    assert key(build_args={"A": "1", "B": "2"}) == key(build_args={"B": "2", "A": "1"})


@pytest.mark.parametrize(
    "change",
    [
        {"dockerfile": b"FROM x\nRUN true\n"},
        {"dockerignore": b"*\n"},
        {"build_args": {"V": "2"}},
        {"base_ids": ["sha256:other"]},
        {"recipe": "2"},
    ],
)
def test_each_input_changes_the_key(change: dict[str, object]) -> None:
    assert key(**change) != key()


def test_file_content_name_and_executable_bit_change_the_key_but_other_mode_bits_do_not() -> None:
    assert key(files=(file_input("a.txt", b"beta", 0o644), FILES[1])) != key()
    assert key(files=(file_input("b.txt", b"alpha", 0o644), FILES[1])) != key()
    assert key(files=(file_input("a.txt", b"alpha", 0o744), FILES[1])) != key()
    assert key(files=(file_input("a.txt", b"alpha", 0o600), FILES[1])) == key()


def test_keyed_tags_name_one_input_set_and_are_told_apart_from_other_tags() -> None:
    tag = keyed_tag("0.32.0", "3f2a9c01d4e5b6a7" + "0" * 48)
    assert tag == "0.32.0-in-3f2a9c01d4e5b6a7"
    assert is_keyed_tag_of("0.32.0", tag)
    assert not is_keyed_tag_of("0.32.0", "0.32.0")
    assert not is_keyed_tag_of("0.32", tag)  # another release's builds are not this one's stale tags
    assert not is_keyed_tag_of("0.32.0", "0.32.0-in-notahexstring!!")


def test_a_changed_copied_file_changes_the_key_and_an_unrelated_one_does_not(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "Dockerfile").write_text("FROM python:3.11-slim-bookworm\nCOPY app.py /app.py\n")
    (tmp_path / "img" / "app.py").write_text("print(1)\n")
    spec = ImageSpec("t", "example/t", "1", "img/Dockerfile", "img")

    def current() -> str:
        inputs = read_inputs(spec, tmp_path)
        return cache_key(
            dockerfile=inputs.dockerfile,
            dockerignore=inputs.dockerignore,
            files=inputs.files,
            build_args={},
            base_ids=["sha256:b"],
        )

    first = current()
    (tmp_path / "img" / "notes.md").write_text("not copied\n")
    assert current() == first
    (tmp_path / "img" / "app.py").write_text("print(2)\n")
    assert current() != first
