"""Reading a Dockerfile's inputs: base images, COPY sources and .dockerignore, as Docker resolves them."""

from __future__ import annotations

import pytest
from e2e.images.base import BASE_REF
from e2e.images.build import read_inputs
from e2e.images.dockerfile import (
    DockerfileError,
    DockerIgnore,
    base_images,
    context_inputs,
    copy_sources,
    instructions,
    selected_by,
    substitute,
)
from e2e.images.specs import all_images

MULTI_STAGE = """\
# syntax=docker/dockerfile:1
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG OTHER
FROM ${PYTHON_IMAGE} AS build
RUN pip install \\
    # a comment inside a continued line
    thing
FROM --platform=linux/amd64 build AS again
FROM $PYTHON_IMAGE
COPY --from=build /opt/x /opt/x
"""


def test_continuation_lines_are_joined_and_comments_dropped() -> None:
    run = [i for i in instructions(MULTI_STAGE) if i.keyword == "RUN"]
    assert [(i.args, i.line) for i in run] == [("pip install thing", 5)]


def test_unterminated_continuation_is_an_error() -> None:
    with pytest.raises(DockerfileError, match="continuation"):
        instructions("FROM a\nRUN echo \\\n")


def test_substitution_forms() -> None:
    values = {"A": "x", "EMPTY": ""}
    assert substitute("$A/${A}/${MISSING:-d}/${EMPTY:-e}/${A:+alt}/${EMPTY:+alt}", values) == "x/x/d/e/alt/"


def test_from_lines_resolve_global_args_and_skip_stages() -> None:
    assert base_images(MULTI_STAGE, {}) == ["python:3.11-slim-bookworm"]
    assert base_images(MULTI_STAGE, {"PYTHON_IMAGE": "python:3.12"}) == ["python:3.12"]


def test_build_args_not_declared_before_from_do_not_reach_it() -> None:
    text = "FROM ${IMG:-debian:12}\nARG IMG=ignored\nFROM scratch\n"
    assert base_images(text, {"IMG": "other"}) == ["debian:12"]


def test_a_dockerfile_without_from_is_refused() -> None:
    with pytest.raises(DockerfileError, match="no FROM"):
        base_images("RUN true\n", {})


def test_copy_sources_skip_stage_copies_and_read_flags_and_json() -> None:
    text = (
        "FROM a\n"
        "COPY --chown=1:1 requirements/runtime.txt ./pyproject.toml /src/\n"
        'COPY ["e2e/vllm_sim.py", "/opt/sim/"]\n'
        "COPY --from=build /opt /opt\n"
        "ADD local.tar /x\n"
    )
    assert copy_sources(text) == ["requirements/runtime.txt", "pyproject.toml", "e2e/vllm_sim.py", "local.tar"]


@pytest.mark.parametrize(
    ("line", "message"),
    [("ADD https://example.invalid/x.tgz /x", "network"), ("COPY $SRC /x", "variable"), ("COPY only", "source")],
)
def test_copies_whose_inputs_cannot_be_known_are_refused(line: str, message: str) -> None:
    with pytest.raises(DockerfileError, match=message):
        copy_sources(f"FROM a\n{line}\n")


ROOT_IGNORE = "*\n!pyproject.toml\n!operator/disagg\n**/__pycache__\n**/*.pyc\n"


@pytest.mark.parametrize(
    ("path", "excluded"),
    [
        ("pyproject.toml", False),
        ("operator/disagg/cli/run.py", False),
        ("operator/disagg/__pycache__/x.cpython-311.pyc", True),
        ("operator/disagg/api/y.pyc", True),
        (".venv/bin/python", True),
        ("e2e/vllm_sim.py", True),
        ("README.md", True),
    ],
)
def test_dockerignore_last_match_wins_and_parents_match_children(path: str, excluded: bool) -> None:
    assert DockerIgnore(ROOT_IGNORE).excluded(path) is excluded


def test_dockerignore_comments_and_leading_slashes() -> None:
    ignore = DockerIgnore("# comment\n/build/\n!build/keep\n")
    assert ignore.excluded("build/out.o")
    assert not ignore.excluded("build/keep")
    assert not ignore.excluded("src/build.py")


def test_globs_stay_within_a_segment() -> None:
    assert selected_by("*.txt", "a.txt")
    assert not selected_by("*.txt", "dir/a.txt")
    assert selected_by("dir/*", "dir/sub/a.txt")  # a matched directory is copied whole
    assert selected_by(".", "anything/at/all")


def test_a_copy_source_excluded_by_dockerignore_is_an_error() -> None:
    """The simulator image's script was excluded by the root .dockerignore once: the build could never succeed."""
    with pytest.raises(DockerfileError, match=r"e2e/vllm_sim\.py"):
        context_inputs(["e2e/vllm_sim.py"], ["e2e/vllm_sim.py"], DockerIgnore(ROOT_IGNORE))


def test_context_inputs_are_the_copied_files_after_ignore() -> None:
    files = ["operator/disagg/a.py", "operator/disagg/__pycache__/a.pyc", "pyproject.toml", "other.txt"]
    got = context_inputs(["operator/disagg", "pyproject.toml"], files, DockerIgnore(ROOT_IGNORE))
    assert got == ["operator/disagg/a.py", "pyproject.toml"]


@pytest.mark.parametrize("spec", all_images(), ids=lambda spec: spec.name)
def test_every_repository_dockerfile_builds_from_the_harness_base_and_copies_existing_files(spec: object) -> None:
    from e2e.images.specs import ImageSpec

    assert isinstance(spec, ImageSpec)
    inputs = read_inputs(spec)
    assert inputs.base_refs == (BASE_REF,), "every FROM must name the one image the harness can provide"
    paths = [f.path for f in inputs.files]
    assert not [p for p in paths if "__pycache__" in p or p.endswith(".pyc")]
    expected = {
        "operator": {"requirements/runtime.txt", "pyproject.toml", "README.md", "operator/disagg/cli/run.py"},
        "vllm-sim": {"e2e/vllm_sim.py"},
        "vllm-cpu": {"requirements.txt", "disagg_amx_permit.py", "disagg-amx-permit.pth", "make_tiny_model.py"},
        "router": set(),
        "mooncake": {"requirements.txt"},
    }[spec.name]
    assert expected <= set(paths)


def test_empty_lines_inside_a_continuation_do_not_end_the_instruction() -> None:
    steps = instructions("FROM a\nRUN one \\\n\n    two\nUSER 1\n")
    assert [(i.keyword, i.args) for i in steps] == [("FROM", "a"), ("RUN", "one two"), ("USER", "1")]
