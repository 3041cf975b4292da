"""An image's cache key: a hash of everything its build reads (pure).

Inputs: the Dockerfile, the .dockerignore, every context file it copies (path, executable bit, content digest), the
build arguments, the ids of the base images and the harness's own build recipe version. Modification times and
other permission bits are left out so a fresh clone of the same commit gets the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Bumped when the way the harness builds changes (flags, labels) in a way the inputs below do not show.
BUILD_RECIPE = "1"
KEY_TAG_SEPARATOR = "-in-"
KEY_TAG_LENGTH = 16


@dataclass(frozen=True)
class FileInput:
    path: str  # context-relative, POSIX
    executable: bool
    sha256: str


def file_input(path: str, content: bytes, mode: int) -> FileInput:
    return FileInput(path, bool(mode & 0o111), hashlib.sha256(content).hexdigest())


def cache_key(
    *,
    dockerfile: bytes,
    dockerignore: bytes,
    files: Sequence[FileInput],
    build_args: Mapping[str, str],
    base_ids: Sequence[str],
    recipe: str = BUILD_RECIPE,
) -> str:
    """Order-independent in files and build arguments; base image order is the Dockerfile's and kept."""
    document = {
        "recipe": recipe,
        "dockerfile": hashlib.sha256(dockerfile).hexdigest(),
        "dockerignore": hashlib.sha256(dockerignore).hexdigest(),
        "files": sorted([f.path, f.executable, f.sha256] for f in files),
        "build_args": sorted(build_args.items()),
        "bases": list(base_ids),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def keyed_tag(tag: str, key: str) -> str:
    """The tag naming one set of inputs, e.g. `0.32.0-in-3f2a9c01d4e5b6a7` (Docker tags allow 128 characters)."""
    return f"{tag}{KEY_TAG_SEPARATOR}{key[:KEY_TAG_LENGTH]}"


def is_keyed_tag_of(tag: str, candidate: str) -> bool:
    prefix = f"{tag}{KEY_TAG_SEPARATOR}"
    rest = candidate[len(prefix) :]
    return candidate.startswith(prefix) and len(rest) == KEY_TAG_LENGTH and all(c in "0123456789abcdef" for c in rest)
