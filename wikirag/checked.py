"""Index files read once and checked against their checksums on the way in.

A build's manifest (and a composition view's ``view.json``) records a sha256 of every file. A reader made
by :func:`reader` reads a file's bytes, checks them and hands the same bytes on to be parsed — a file is
never read twice (once to check, once to parse), and :func:`npy` makes an array straight from them,
without a copy. A mismatch raises :class:`~wikirag.errors.ChecksumMismatch` (``checked.Mismatch``), which the caller
reports as a damaged index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .errors import ChecksumMismatch as Mismatch  # a file differs from its recorded checksum (or has none)

Read = Callable[[str], bytes]  # a file name inside a folder -> its bytes, checked


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def reader(folder: Path, checksums: dict[str, str] | None) -> Read:
    """A :data:`Read` for ``folder``: each file is checked against ``checksums[name]`` (None: not checked,
    for code that reads files it has just written)."""

    def read(name: str) -> bytes:
        data = (folder / name).read_bytes()
        if checksums is not None and sha256(data) != checksums.get(name):
            raise Mismatch(f"{name} does not match its checksum")
        return data

    return read


def read_all(read: Read, names: list[str]) -> dict[str, bytes]:
    """``read`` of each name, two at a time (reading and sha256 run outside the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(names, pool.map(read, names)))


def plain(folder: Path) -> Read:
    return reader(folder, None)


def npy(data: bytes, name: str = "array") -> np.ndarray:
    """The array in the bytes of a ``.npy`` file, sharing their memory (read-only); :class:`ValueError`
    if they do not hold a whole one."""
    import io

    try:
        stream = io.BytesIO(data)
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
