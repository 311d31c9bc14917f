"""A build's passages on disk and in memory: columns, not one object per passage.

A build keeps its passages in ``passages/``:

* ``text.bin`` — every passage's text, UTF-8, end to end;
* ``table.npy`` — one row per passage (int64): path id, start, end, line, heading id, and the byte
  range of its text in ``text.bin``;
* ``paths.bin`` + ``paths.npy``, ``headings.bin`` + ``headings.npy`` — the paths and the heading paths
  the ids refer to (each once): UTF-8 end to end, and each one's byte offset (:class:`Strings`);
* ``stats.npy`` — each path's source size and mtime (int64) as the build read them.

Loading maps every file read-only (:meth:`wikirag.checked.Files.buffer`): no Python object per passage
or per path until a passage is asked for
(:meth:`ChunkTable.__getitem__` makes its :class:`~wikirag.passage.Chunk` then), and no text in the
process's memory but the pages of the passages it has shown (the rest stays in the page cache, shared
by every process serving the build). At a million passages the text is 614 MB that a process no longer
reads at start nor holds, and the million paths and headings (a JSON list before: 0.8 s to parse) are
not parsed at all.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from . import checked
from .passage import Chunk

FOLDER = "passages"
_PATH, _START, _END, _LINE, _HEADING, _LO, _HI = range(7)


class Indexed(Sequence):
    """A read-only sequence whose items are made when asked for (:meth:`item`, for ``0 <= i < len``):
    slices and negative indices are handled here."""

    def item(self, i: int):  # pragma: no cover - every subclass has its own
        raise NotImplementedError

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self.item(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        return self.item(int(i) % n)

    def __iter__(self):
        for i in range(len(self)):
            yield self.item(i)


class Strings(Indexed, Sequence[str]):
    """Strings stored UTF-8 end to end (``blob``), string ``i`` at bytes ``offsets[i]:offsets[i + 1]``:
    each is decoded when asked for."""

    def __init__(self, blob: bytes | mmap.mmap, offsets: np.ndarray):
        self.blob, self.offsets = blob, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def item(self, i: int) -> str:
        return self.blob[int(self.offsets[i]):int(self.offsets[i + 1])].decode("utf-8")

    @staticmethod
    def write(folder: Path, name: str, strings: Sequence[str]) -> None:
        data = [s.encode("utf-8") for s in strings]
        (folder / f"{name}.bin").write_bytes(b"".join(data))
        np.save(folder / f"{name}.npy", np.concatenate([[0], np.cumsum([len(d) for d in data], dtype=np.int64)]).astype(np.int64))

    @classmethod
    def read(cls, files: checked.Files, name: str) -> Strings:
        blob, offsets = files.buffer(f"{name}.bin"), files.array(f"{name}.npy")
        if (offsets.ndim != 1 or not len(offsets) or offsets[0] != 0 or offsets[-1] != len(blob)
                or (np.diff(offsets) < 0).any()):
            raise ValueError(f"{name}.npy does not fit {name}.bin")
        return cls(blob, offsets)


class ChunkTable(Indexed, Sequence[Chunk]):
    """A build's passages, in index order. Read-only; indexing makes a :class:`Chunk`."""

    def __init__(self, table: np.ndarray, text: bytes | mmap.mmap, paths: Sequence[str], headings: Sequence[str],
                 stats: np.ndarray):
        self.table, self.text, self.paths, self.headings = table, text, paths, headings
        self._stats = stats  # per path: size, mtime_ns

    def source_stats(self, ids: Iterable[int]) -> dict[str, tuple[int, int]]:
        """For the passages ``ids``: path -> ``(size, mtime_ns)`` of its source file as the build read it."""
        out = {}
        for i in ids:
            n = int(self.table[i, _PATH])
            out[self.paths[n]] = (int(self._stats[n, 0]), int(self._stats[n, 1]))
        return out

    def __len__(self) -> int:
        return len(self.table)

    def item(self, i: int) -> Chunk:
        row = self.table[i].tolist()
        return Chunk(self.paths[row[_PATH]], row[_START], row[_END], row[_LINE], self.headings[row[_HEADING]],
                     self.text[row[_LO]:row[_HI]].decode("utf-8"))

    def path_ids(self) -> np.ndarray:
        """Each passage's path, as an index into :attr:`paths`."""
        return self.table[:, _PATH]

    def by_path(self) -> dict[str, list[Chunk]]:
        """Every passage, grouped by its path (in index order)."""
        out: dict[str, list[Chunk]] = {}
        for chunk in self:
            out.setdefault(chunk.path, []).append(chunk)
        return out

    def ranges(self) -> dict[str, tuple[int, int]]:
        """Per path, the range ``(first, end)`` of its passages (a build stores a path's passages together)."""
        ids = self.path_ids()
        if not len(ids):
            return {}
        bounds = np.flatnonzero(np.diff(ids)) + 1
        starts = np.concatenate([[0], bounds]).tolist()
        ends = np.concatenate([bounds, [len(ids)]]).tolist()
        return {self.paths[int(ids[s])]: (s, e) for s, e in zip(starts, ends)}


def write(folder: Path, chunks: Sequence[Chunk], sources: dict[str, tuple[int, int]]) -> None:
    """Write ``chunks`` (grouped by path, as a build orders them) into ``folder/passages``."""
    out = folder / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, int] = {}
    headings: dict[str, int] = {}
    rows = np.empty((len(chunks), 7), dtype=np.int64)
    blobs = []
    at = 0
    for i, c in enumerate(chunks):
        data = c.text.encode("utf-8")
        blobs.append(data)
        rows[i] = (paths.setdefault(c.path, len(paths)), c.start, c.end, c.line,
                   headings.setdefault(c.heading, len(headings)), at, at + len(data))
        at += len(data)
    (out / "text.bin").write_bytes(b"".join(blobs))
    np.save(out / "table.npy", rows)
    names = list(paths)
    Strings.write(out, "paths", names)
    Strings.write(out, "headings", list(headings))
    np.save(out / "stats.npy", np.array([sources.get(p, (0, 0)) for p in names], dtype=np.int64).reshape(-1, 2))


def read(folder: Path, files: checked.Files | None = None) -> ChunkTable:
    """The passages of the build in ``folder``, its files checked by ``files`` (:func:`wikirag.checked.reader`;
    default: unchecked), the text and the arrays mapped."""
    read = (files or checked.plain(folder)).under(f"{FOLDER}/")
    table = read.array("table.npy")
    if table.ndim != 2 or table.shape[1] != 7:
        raise ValueError(f"{FOLDER}/table.npy has shape {table.shape}, not (passages, 7)")
    paths, headings, text = Strings.read(read, "paths"), Strings.read(read, "headings"), read.buffer("text.bin")
    if len(table) and (table[:, _PATH].min() < 0 or table[:, _PATH].max() >= len(paths)
                       or table[:, _HEADING].min() < 0 or table[:, _HEADING].max() >= len(headings)
                       or (table[:, _LO] > table[:, _HI]).any() or table[:, _LO].min() < 0
                       or table[:, _HI].max() > len(text)):
        raise ValueError(f"{FOLDER}/table.npy refers to paths, headings or text that are not there")
    stats = read.array("stats.npy")
    if stats.shape != (len(paths), 2):
        raise ValueError(f"{FOLDER}/stats.npy has shape {stats.shape}, not ({len(paths)} paths, 2)")
    return ChunkTable(table, text, paths, headings, stats)
