"""What a Dockerfile reads: the images it starts `FROM` and the build-context files it copies (pure, no I/O).

Only the subset of the Dockerfile language the harness needs to key its cache is understood; anything that would
make the inputs unknowable (ADD of a URL, a variable in a COPY source) is refused rather than guessed.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_VARIABLE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<op>[-+])(?P<word>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)
_GLOB_CHARS = frozenset("*?[")


class DockerfileError(ValueError):
    pass


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str
    line: int  # 1-based line where the instruction starts


def instructions(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comment lines dropped (the default `\\` escape)."""
    result: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and (not stripped or stripped.startswith("#")):
            continue  # Docker drops comment and empty lines inside a continued instruction too
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        joined = " ".join(part.strip() for part in pending).strip()
        pending = []
        keyword, _, args = joined.partition(" ")
        result.append(Instruction(keyword.upper(), args.strip(), start))
    if pending:
        raise DockerfileError(f"line {start}: the last instruction ends with a line continuation")
    return result


def substitute(value: str, variables: Mapping[str, str]) -> str:
    """`$NAME`, `${NAME}`, `${NAME:-default}` and `${NAME:+alternative}`, as Docker expands them."""

    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("bare")
        current = variables.get(name, "")
        op = match.group("op")
        if op == "-":
            return current or match.group("word")
        if op == "+":
            return match.group("word") if current else ""
        return current

    return _VARIABLE.sub(replace, value)


def base_images(text: str, build_args: Mapping[str, str]) -> list[str]:
    """The images the stages start FROM, in order and without repeats; earlier stages and `scratch` excluded.

    Global ARGs (before the first FROM) are the only variables a FROM line sees; `--build-arg` overrides them.
    """
    global_args: dict[str, str] = {}
    stages: set[str] = set()
    images: list[str] = []
    seen_from = False
    for inst in instructions(text):
        if inst.keyword == "ARG" and not seen_from:
            for name, value in _arg_defaults(inst.args).items():
                global_args[name] = build_args.get(name, value)
        elif inst.keyword == "FROM":
            seen_from = True
            words = [w for w in inst.args.split() if not w.startswith("--")]
            if not words:
                raise DockerfileError(f"line {inst.line}: FROM names no image")
            image = substitute(words[0], global_args)
            if len(words) >= 3 and words[1].lower() == "as":
                stages.add(words[2].lower())
            if image.lower() in stages or image == "scratch" or image in images:
                continue
            images.append(image)
    if not seen_from:
        raise DockerfileError("no FROM instruction")
    return images


def _arg_defaults(args: str) -> dict[str, str]:
    defaults: dict[str, str] = {}
    for word in args.split():
        name, _, value = word.partition("=")
        defaults[name] = value.strip('"')
    return defaults


def copy_sources(text: str) -> list[str]:
    """The build-context paths that COPY and ADD read (sources of `--from` copies come from stages, not the context)."""
    sources: list[str] = []
    for inst in instructions(text):
        if inst.keyword not in ("COPY", "ADD"):
            continue
        words = _copy_words(inst)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        if any(flag.startswith("--from") for flag in flags):
            continue
        if len(paths) < 2:
            raise DockerfileError(f"line {inst.line}: {inst.keyword} needs a source and a destination")
        for source in paths[:-1]:
            if inst.keyword == "ADD" and re.match(r"^[a-z][a-z0-9+.-]*://|^git@", source):
                raise DockerfileError(f"line {inst.line}: ADD {source} fetches from the network; copy a file instead")
            if "$" in source:
                raise DockerfileError(f"line {inst.line}: variable in COPY source {source!r} is not supported")
            sources.append(normalize(source))
    return sources


def _copy_words(inst: Instruction) -> list[str]:
    args = inst.args
    flags: list[str] = []
    while args.startswith("--"):
        flag, _, args = args.partition(" ")
        flags.append(flag)
        args = args.strip()
    if args.startswith("["):
        try:
            parsed = json.loads(args)
        except ValueError as exc:
            raise DockerfileError(f"line {inst.line}: bad JSON form: {exc}") from exc
        return [*flags, *(str(p) for p in parsed)]
    return [*flags, *args.split()]


def normalize(path: str) -> str:
    """A context-relative POSIX path: no leading `/` or `./`, `.` for the whole context."""
    cleaned = posixpath.normpath("/" + path.strip()).lstrip("/")
    return cleaned or "."


def has_glob(path: str) -> bool:
    return any(char in _GLOB_CHARS for char in path)


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's path patterns: `*` and `?` stay within one path segment, `**` spans any number of them."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            if pattern[i + 1 : i + 2] == "*":
                i += 1
                if pattern[i + 1 : i + 2] == "/":
                    i += 1
                    out.append("(?:.*/)?")
                else:
                    out.append(".*")
            else:
                out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(char))
            else:
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]")
                i = end
        elif char == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out))


def _parents(path: str) -> Iterable[str]:
    parts = path.split("/")
    for end in range(1, len(parts) + 1):
        yield "/".join(parts[:end])


@dataclass(frozen=True)
class IgnoreRule:
    regex: re.Pattern[str]
    exception: bool


class DockerIgnore:
    """`.dockerignore` semantics: the last matching rule wins; a rule matching a parent directory matches its files."""

    def __init__(self, text: str = "") -> None:
        rules: list[IgnoreRule] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exception = line.startswith("!")
            pattern = normalize(line[1:] if exception else line)
            rules.append(IgnoreRule(_pattern_regex(pattern), exception))
        self.rules = tuple(rules)

    def excluded(self, path: str) -> bool:
        result = False
        for rule in self.rules:
            if any(rule.regex.fullmatch(part) for part in _parents(path)):
                result = not rule.exception
        return result


def selected_by(source: str, path: str) -> bool:
    """Whether COPY `source` copies the context file `path` (a file itself, a directory's contents, or a glob)."""
    if source == ".":
        return True
    if not has_glob(source):
        return path == source or path.startswith(source + "/")
    regex = _pattern_regex(source)
    return any(regex.fullmatch(part) for part in _parents(path))


def context_inputs(sources: Sequence[str], candidates: Iterable[str], ignore: DockerIgnore) -> list[str]:
    """The context files the COPY sources read, after .dockerignore; a source that reads nothing is an error.

    `candidates` are context-relative file paths (at least every file under each source); the result is sorted.
    """
    remaining = sorted({path for path in candidates if not ignore.excluded(path)})
    chosen: set[str] = set()
    for source in sources:
        hits = [path for path in remaining if selected_by(source, path)]
        if not hits:
            raise DockerfileError(
                f"COPY source {source!r} matches no file in the build context (missing, or excluded by .dockerignore)"
            )
        chosen.update(hits)
    return sorted(chosen)
