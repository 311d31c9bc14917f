"""Find a wiki's markdown files and read them safely.

Only ``*.md`` and ``*.markdown`` files are considered. Hidden files and folders (``.index``,
``.obsidian``, ``.git``) are never walked. Symlinked files are followed only when they stay inside the
source root; symlinked folders are never followed (no cycles, no escapes); both are reported. Meta
files (``meta_files`` patterns on the file name, by default ``_*`` and ``index.md``) and ``exclude``
patterns (fnmatch on the path relative to the root, where ``*`` also matches ``/``) are left out.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .wiki import Wiki

MARKDOWN_SUFFIXES = (".md", ".markdown")


@dataclass(frozen=True)
class SourceFile:
    """A candidate markdown file: its path relative to the root (``/``-separated) and its stat."""

    path: str
    abspath: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Skipped:
    """A file that is not indexed, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class Discovery:
    root: Path
    files: list[SourceFile]
    skipped: list[Skipped]


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob on ``/``-separated relative paths: ``**`` spans folders, ``*`` and ``?`` do not."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end].replace("\\", "\\\\")
            out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _candidates(root: Path, pattern: str | None, skipped: list[Skipped]) -> list[Path]:
    """Walk ``root`` without following symlinked folders; keep markdown files matching ``pattern``."""
    wanted = glob_regex(pattern) if pattern is not None else None
    found: list[Path] = []
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(folder)
        keep = []
        for name in sorted(dirnames):
            if name.startswith("."):
                continue
            if (here / name).is_symlink():
                rel = (here / name).relative_to(root).as_posix()
                skipped.append(Skipped(rel, "symlinked folder: not followed"))
                continue
            keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            if name.startswith(".") or not name.lower().endswith(MARKDOWN_SUFFIXES):
                continue
            if wanted is None or wanted.match((here / name).relative_to(root).as_posix()):
                found.append(here / name)
    return found


def discover(wiki: Wiki) -> Discovery:
    """List the files a build would read, and those it leaves out with a reason."""
    spec = wiki.source_spec()
    root = spec.root
    skipped: list[Skipped] = []
    if not root.is_dir():
        return Discovery(root, [], [Skipped(str(root), "source folder does not exist")])
    files: list[SourceFile] = []
    meta, exclude = wiki.manifest.meta_files, wiki.manifest.exclude
    for path in _candidates(root, spec.pattern, skipped):
        rel = path.relative_to(root).as_posix()
        if any(fnmatch.fnmatchcase(rel, pattern) for pattern in exclude):
            continue
        if any(fnmatch.fnmatchcase(path.name, pattern) for pattern in meta):
            skipped.append(Skipped(rel, "meta file"))
            continue
        if path.is_symlink() and not _inside(path.resolve(), root):
            skipped.append(Skipped(rel, "symlink leads outside the source root: not followed"))
            continue
        try:
            stat = path.stat()
        except OSError as exc:
            skipped.append(Skipped(rel, f"cannot read: {exc.strerror or exc}"))
            continue
        if not path.is_file():
            continue
        files.append(SourceFile(rel, path, stat.st_size, stat.st_mtime_ns))
    return Discovery(root, files, skipped)


def decode(data: bytes) -> tuple[str | None, str | None]:
    """Decode a markdown file's bytes; return ``(text, None)`` or ``(None, reason it is skipped)``."""
    if b"\x00" in data[:8192]:
        return None, "binary file (contains NUL bytes)"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte {exc.start}): convert it to UTF-8"
