"""Index builds in the background: one process per build, so the app keeps answering while a wiki rebuilds.

::

    from wikirag import Workspace, background

    ws = Workspace.locate()
    job = background.start(ws, "brewing")         # returns at once; the running job if there is one
    job.wait(60)
    print(job.state, job.files, job.chunks, job.error)
    background.job(ws, "brewing")                 # the latest job of the wiki (or None), from any thread

A job runs :func:`wikirag.index.build` in a child process started with the ``spawn`` context (never
``fork``: the app's server has threads), at a lower CPU priority (:data:`NICE`), so the build's Python work
neither holds the app's GIL nor takes a core from a query. The child sends its progress (throttled to
:data:`PROGRESS_SECONDS`) and its outcome over a ``multiprocessing`` queue; a small thread per job reads it
into the :class:`Job`. Queries keep being answered from the previous index while the build runs: a build
is written into a folder of its own and published by renaming ``CURRENT``, which the index cache notices
by itself (:mod:`wikirag.cache`).

Jobs live in this process's memory (one per workspace home and wiki name, the latest one); nothing is
persisted, and a job whose process is gone (killed, out of memory) ends ``failed``. Two builds of one wiki
are prevented here (:func:`start` returns the running job) and, across processes, by the build lock
(:func:`wikirag.store.build_lock`): a job that meets a build started elsewhere fails with its message.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue as queue_mod
import sys
import threading
import time
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .errors import WikiragError
from .workspace import Workspace

log = logging.getLogger("wikirag.background")

NICE = 10  # the build process's niceness increment (read by start): a query's thread wins the CPU over a build
PROGRESS_SECONDS = 0.1  # the child sends at most one progress message this often (and each stage's last)
CRASHED = "the build stopped on an unexpected error (logged on the server); the previous index still serves"

_jobs: dict[tuple[str, str], Job] = {}
_lock = threading.Lock()


@dataclass
class Job:
    """One background build of one wiki. Its fields are updated by the job's thread as messages arrive;
    read them from any thread (``state`` is set last, so a ``built`` job's report fields are complete).

    ``state``: ``running``, then ``built``, ``up to date`` or ``failed``. ``stage``/``done``/``total`` (read
    together as ``progress``): the build's progress (``stage`` is ``"starting"``, ``"reading"`` or
    ``"embedding"``, the stages of :data:`wikirag.index.Progress`). ``files``, ``chunks``,
    ``seconds``, ``build_id`` and ``warnings`` are the :class:`wikirag.index.BuildReport`'s once built; ``error`` is the
    message of a failed build. ``started``/``ended`` are ``time.time()`` values; ``pid`` the build process's.
    """

    home: Path
    wiki: str
    force: bool = False
    state: str = "running"
    progress: tuple[str, int, int] = ("starting", 0, 0)  # (stage, done, total), replaced as one
    started: float = field(default_factory=time.time)
    ended: float | None = None
    files: int = 0
    chunks: int = 0
    seconds: float = 0.0
    build_id: str | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)  # the report's (a dense layer not uploaded to Qdrant)
    pid: int | None = None
    _finished: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def stage(self) -> str:
        return self.progress[0]

    @property
    def done(self) -> int:
        return self.progress[1]

    @property
    def total(self) -> int:
        return self.progress[2]

    @property
    def fraction(self) -> float:
        """The current stage's progress, 0.0 to 1.0."""
        _, done, total = self.progress
        return min(done / total, 1.0) if total else 0.0

    @property
    def elapsed(self) -> float:
        """Seconds since the job started (until it ended, once it has)."""
        return (self.ended or time.time()) - self.started

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends (at most ``timeout`` seconds); True if it has."""
        return self._finished.wait(timeout)

    def _end(self, state: str, **report: object) -> None:
        for name, value in report.items():
            setattr(self, name, value)
        self.ended = time.time()
        self.state = state
        self._finished.set()


def _key(ws: Workspace | str | Path, name: str) -> tuple[str, str]:
    home = ws.home if isinstance(ws, Workspace) else Path(ws)
    return str(Path(home).resolve()), name


def job(ws: Workspace | str | Path, name: str) -> Job | None:
    """The latest background job of wiki ``name`` of workspace ``ws`` (a workspace or its home), or None."""
    with _lock:
        return _jobs.get(_key(ws, name))


def start(ws: Workspace | str | Path, name: str, *, force: bool = False) -> Job:
    """Start building wiki ``name`` in a background process and return its job at once. If a job of that
    wiki is running, return it instead (``force`` is then ignored). ``force`` rebuilds every file, as
    ``wikirag.index.build(..., force=True)``. Raises :class:`wikirag.errors.NotFound` for an unknown wiki
    (only when ``ws`` is a :class:`Workspace`); any other failure ends the job ``failed``."""
    if isinstance(ws, Workspace):
        ws.wiki(name)  # an unknown or malformed wiki is refused here, not in a process
    key = _key(ws, name)
    with _lock:
        running = _jobs.get(key)
        if running is not None and running.running:
            return running
        new = Job(Path(key[0]), name, force)
        context = multiprocessing.get_context("spawn")
        messages = context.Queue()
        process = context.Process(target=_child, args=(key[0], name, force, NICE, messages),
                                  name=f"wikirag-build-{name}", daemon=True)  # stops with the app
        try:
            with _main_hidden():
                process.start()
        except OSError as exc:  # e.g. no more processes allowed
            messages.close()
            log.error("background build of wiki '%s' (%s) could not start: %s", name, key[0], exc)
            new._end("failed", error=f"the build process could not start ({exc.strerror or exc}); "
                                     "the previous index still serves")
            _jobs[key] = new
            return new
        new.pid = process.pid
        threading.Thread(target=_watch, args=(new, process, messages), name=f"wikirag-build-{name}-watch",
                         daemon=True).start()
        _jobs[key] = new
        return new


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Start a spawned process without the parent's ``__main__``. Streamlit installs the app's entry script
    as ``__main__`` while it runs a page, and ``spawn`` would run that script again in the child (as
    ``__mp_main__``): for ``streamlit run app.py``, the whole router. The child needs none of it, only
    :func:`_child`. Restored unless a script run installed its own meanwhile."""
    real, stub = sys.modules.get("__main__"), types.ModuleType("__main__")
    sys.modules["__main__"] = stub
    try:
        yield
    finally:
        if sys.modules.get("__main__") is stub and real is not None:
            sys.modules["__main__"] = real


def _watch(job: Job, process: multiprocessing.process.BaseProcess, messages: multiprocessing.Queue) -> None:
    """Read the child's messages into ``job`` until it reports its outcome or its process is gone."""
    try:
        while job.running:
            try:
                message = messages.get(timeout=0.5)
            except queue_mod.Empty:
                if process.is_alive():
                    continue
                try:  # what it sent just before it ended is in the pipe already
                    message = messages.get(timeout=0.2)
                except queue_mod.Empty:
                    log.error("background build of wiki '%s' (%s): its process ended (exit code %s) "
                              "without a result", job.wiki, job.home, process.exitcode)
                    job._end("failed", error=f"the build process ended unexpectedly (exit code "
                                             f"{process.exitcode}); the previous index still serves")
                    break
            _apply(job, message)
    except Exception:  # a job must end whatever happens here
        log.exception("background build of wiki '%s' (%s): watching it failed", job.wiki, job.home)
        if job.running:
            job._end("failed", error=CRASHED)
    finally:
        process.join(timeout=30)
        messages.close()


def _apply(job: Job, message: tuple) -> None:
    kind, *values = message
    if kind == "progress":
        job.progress = tuple(values)
    elif kind == "report":
        state, files, chunks, seconds, build_id, warnings = values
        job._end(state, files=files, chunks=chunks, seconds=seconds, build_id=build_id, warnings=list(warnings))
    elif kind == "error":
        job._end("failed", error=values[0])
    else:  # "crash": the child's traceback goes to the log, never to a page
        log.error("background build of wiki '%s' (%s) failed:\n%s", job.wiki, job.home, values[0])
        job._end("failed", error=CRASHED)


def _child(home: str, name: str, force: bool, nice: int, messages: multiprocessing.Queue) -> None:
    """The build process: build the wiki, sending progress and then one outcome message."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no os.nice on this system
        os.nice(nice)
    last = {"stage": "", "at": 0.0}

    def progress(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if stage != last["stage"] or done >= total or now - last["at"] >= PROGRESS_SECONDS:
            last["stage"], last["at"] = stage, now
            messages.put(("progress", stage, done, total))

    try:
        from .index import build

        report = build(Workspace(home).wiki(name), force=force, progress=progress)
        messages.put(("report", report.state, report.files, report.chunks, report.seconds, report.build_id,
                      report.warnings))
    except WikiragError as exc:
        messages.put(("error", str(exc)))
    except Exception:  # noqa: BLE001 - reported to the parent, which logs it
        messages.put(("crash", traceback.format_exc()))
    messages.close()
    messages.join_thread()  # everything is in the pipe before the process ends
