"""Index files checked against their checksums on the way in, read once or mapped.

A build's manifest (and a composition view's ``view.json``) records a sha256 of every file. A reader made
by :func:`reader` (:class:`Files`) hands out a folder's files checked:

* ``files(name)``: a small file's bytes, read once, checked, then parsed by the caller (never read twice);
* ``files.array(name)`` / ``files.buffer(name)``: a large file (a ``.npy`` array, the passages' text)
  memory-mapped read-only, not read: a query touches only the pages it needs, and every process that
  maps the same build shares one copy in the page cache (N app processes do not hold N copies).

Checking a mapped file's sha256 would read all of it, at every start (1 GB at a million passages: 0.7 s
of every new process, and all of it resident). So a file is hashed the first time it is used on this
machine, and what was found is written beside it in ``verified.json`` (:data:`STAMP`): per file, its
sha256 and the ``(inode, size, mtime_ns, ctime_ns)`` it had. A later process that finds the same
sha256 expected and the same four values from ``fstat`` trusts the file without hashing it. Any write
to a file, a replacement, a copy or a restored backup changes its ctime (which no program can set
back), so the check is hashed again and a damaged file is still refused. What the stamp cannot see is
a change below the file system (a disk's bit rot with no write): that is the storage's checksums' job.
A build stamps its own files when it publishes them (it has just hashed them), so no process after it
hashes at all. The stamp is best effort: a folder that cannot be written only costs the hashing.

A mismatch raises :class:`~wikirag.errors.ChecksumMismatch` (``checked.Mismatch``), which the caller
reports as a damaged index.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import mmap
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from .errors import ChecksumMismatch as Mismatch  # a file differs from its recorded checksum (or has none)

Read = Callable[[str], bytes]  # a file name inside a folder -> its bytes, checked
STAMP = "verified.json"  # beside a build's (or view's) files: what was hashed, and the file as it was then
_BLOCK = 8 << 20  # bytes hashed at a time (hashlib releases the GIL on large updates)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def reader(folder: Path, checksums: dict[str, str] | None,
           damaged: Callable[[str], Exception] = Mismatch) -> Files:
    """The checked files of ``folder``: each is checked against ``checksums[name]`` (None: not checked,
    for code that reads files it has just written). A file that differs, or is missing, raises
    ``damaged(why)`` (default :class:`Mismatch`; a missing file then raises :class:`FileNotFoundError`)."""
    return Files(folder, checksums, damaged=damaged)


class Files:
    """A folder's files, each checked against its recorded sha256 when it is used (see the module's
    docstring). Calling it reads a file's bytes; :meth:`array` and :meth:`buffer` map one."""

    def __init__(self, folder: Path, checksums: dict[str, str] | None, prefix: str = "",
                 damaged: Callable[[str], Exception] = Mismatch, _stamped: list | None = None):
        self.folder, self.checksums, self.prefix, self.damaged = folder, checksums, prefix, damaged
        self._stamped = _stamped if _stamped is not None else []  # the folder's stamps, read once (shared by under())

    def under(self, prefix: str) -> Files:
        """The same files, named relative to the subfolder ``prefix`` (e.g. ``"bm25/"``)."""
        return Files(self.folder, self.checksums, self.prefix + prefix, self.damaged, self._stamped)

    def _open(self, name: str):
        try:
            return open(self.folder / name, "rb")
        except FileNotFoundError:
            if self.damaged is Mismatch:
                raise
            raise self.damaged(f"{name} is missing") from None

    def __call__(self, name: str) -> bytes:
        name = self.prefix + name
        with self._open(name) as fh:
            data = fh.read()
        if self.checksums is not None and sha256(data) != self.checksums.get(name):
            raise self.damaged(f"{name} does not match its checksum")
        return data

    def check(self, name: str) -> None:
        """Check a file without keeping it (hashed only if its stamp does not vouch for it)."""
        with self._open(self.prefix + name) as fh:
            self._check(fh, self.prefix + name)

    def check_all(self, names: Iterable[str]) -> None:
        """:meth:`check` of each, two at a time (reading and sha256 run outside the GIL)."""
        from concurrent.futures import ThreadPoolExecutor

        names = list(names)
        if len(names) < 2:
            for name in names:
                self.check(name)
            return
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(self.check, names))

    def buffer(self, name: str) -> mmap.mmap | bytes:
        """A file's bytes mapped read-only (``b""`` for an empty file), checked first."""
        with self._open(self.prefix + name) as fh:
            self._check(fh, self.prefix + name)
            if os.fstat(fh.fileno()).st_size == 0:
                return b""
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)  # stays valid after the close

    def array(self, name: str) -> np.ndarray:
        """The array of a ``.npy`` file, mapped read-only (see :func:`npy`), checked first."""
        return npy(self.buffer(name), self.prefix + name)

    def _check(self, fh, name: str) -> None:
        if self.checksums is None:
            return
        want = self.checksums.get(name)
        if want is None:
            raise self.damaged(f"{name} does not match its checksum")
        st = os.fstat(fh.fileno())
        now = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        if not self._stamped:
            self._stamped.append(stamps(self.folder))
        if self._stamped[0].get(name) == [want, *now]:
            return
        if digest(fh) != want:
            raise self.damaged(f"{name} does not match its checksum")
        self._stamped[0][name] = [want, *now]
        stamp(self.folder, {name: [want, *now]})


def digest(fh) -> str:
    """The sha256 of an open file's bytes from where it is, read a block at a time."""
    found = hashlib.sha256()
    view = memoryview(bytearray(_BLOCK))
    while n := fh.readinto(view):
        found.update(view[:n])
    return found.hexdigest()


def stamps(folder: Path) -> dict:
    """``folder``'s :data:`STAMP`: file name -> ``[sha256, inode, size, mtime_ns, ctime_ns]`` ({} if none)."""
    try:
        got = json.loads((folder / STAMP).read_bytes())
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def stamp(folder: Path, found: dict[str, list]) -> None:
    """Add to ``folder``'s :data:`STAMP` these files' ``[sha256, inode, size, mtime_ns, ctime_ns]``
    (best effort: replaced atomically, nothing raised; two processes stamping at once may lose one's
    entries, which costs only a hash later)."""
    tmp = folder / f".{STAMP}.{secrets.token_hex(4)}"
    try:
        tmp.write_text(json.dumps({**stamps(folder), **found}), encoding="utf-8")
        os.replace(tmp, folder / STAMP)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def stamp_all(folder: Path, checksums: dict[str, str]) -> None:
    """Stamp every file of ``checksums`` as it is now (for a writer that has just hashed them)."""
    found = {}
    for name, digest in checksums.items():
        with contextlib.suppress(OSError):
            st = os.stat(folder / name)
            found[name] = [digest, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    stamp(folder, found)


def plain(folder: Path) -> Files:
    return reader(folder, None)


def npy(data: bytes | mmap.mmap, name: str = "array") -> np.ndarray:
    """The array in the bytes (or mapped file) of a ``.npy`` file, sharing their memory (read-only);
    :class:`ValueError` if they do not hold a whole one."""
    try:
        stream = io.BytesIO(data[:65536 + 16])  # the header (never longer); not a copy of a mapped file
        version = np.lib.format.read_magic(stream)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = header(stream)
    except (ValueError, EOFError, SyntaxError) as exc:
        raise ValueError(f"{name} is not a .npy file: {exc}") from None
    if dtype.hasobject:
        raise ValueError(f"{name} holds Python objects, which an index never does")
    count = int(np.prod(shape, dtype=np.int64))
    offset = stream.tell()
    if len(data) - offset != count * dtype.itemsize:
        raise ValueError(f"{name} holds {len(data) - offset} bytes of data for shape {shape} of {dtype}")
    array = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    return array.reshape(shape, order="F" if fortran else "C")
