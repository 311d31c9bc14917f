"""BEIR-format folders as wikis, for ``wikirag eval``: read the judgments, convert, build, compose.

Each folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``) becomes one wiki: every document
is written as a markdown page (``# title`` + text, named after its id) into a cache folder, and the wiki
is built exactly as any other. A ``monolith`` wiki holds all the folders in one index, the baseline
the fusion must match. The conversion and the indexes are cached and redone only when the data changes.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import index as index_mod
from .errors import EvalError
from .wiki import write_manifest
from .workspace import Workspace

MONOLITH = "monolith"
# documents are the unit being judged: keep short ones (NPL's titles) that passages would drop
EVAL_CHUNKING = {"max_tokens": 512, "min_chars": 1}


@dataclass
class Dataset:
    """One judged collection: its queries (id, text) and graded relevance judgments."""

    name: str
    folder: Path | None
    queries: list[tuple[str, str]]
    qrels: dict[str, dict[str, int]]
    docs: int = 0
    exclude_self: bool = False


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_") or "data"
    return slug if slug[0].isalnum() else f"d{slug}"


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """A TSV of ``query-id  corpus-id  score`` (a header line is skipped)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (n == 1 and not parts[-1].lstrip("-").isdigit()):
                continue
            if len(parts) < 3 or not parts[-1].lstrip("-").isdigit():
                raise EvalError(f"{path}:{n}: expected 'query-id<TAB>corpus-id<TAB>score': fix or remove the line")
            qrels.setdefault(parts[0], {})[parts[-2]] = int(parts[-1])
    return qrels


def read_queries(path: Path) -> list[tuple[str, str]]:
    """JSON lines ``{"_id": …, "text": …}``, or a TSV of ``id<TAB>text``, in UTF-8 (a byte-order mark is
    allowed). A query's text is kept as written, control characters and all: the search cleans it
    (:func:`wikirag.retrieval.check_question`), and :func:`wikirag.evaluate.searchable` skips one it cannot."""
    data = path.read_bytes()
    try:
        content = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise EvalError(f"{path}:{line}: not UTF-8 (the byte 0x{data[exc.start]:02x}): save the file as UTF-8, "
                        "not in a Windows code page") from None
    queries = []
    for n, line in enumerate(content.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            if line.lstrip().startswith("{"):
                item = json.loads(line)
                queries.append((str(item["_id"]), str(item["text"])))
            else:
                qid, text = line.split("\t", 1)
                queries.append((qid, text))
        except (ValueError, KeyError, TypeError):
            raise EvalError(f"{path}:{n}: expected a JSON object with _id and text, or id<TAB>text") from None
    return queries


def load_beir(folder: Path, exclude_self: bool = False) -> Dataset:
    """A BEIR folder's test queries that have at least one relevant document, and its qrels."""
    for part in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        if not (folder / part).is_file():
            raise EvalError(f"{folder} is not a BEIR folder: {part} is missing (a BEIR folder holds corpus.jsonl, "
                            "queries.jsonl and qrels/test.tsv): give the folder that contains them")
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    queries = [(qid, text) for qid, text in read_queries(folder / "queries.jsonl")
               if any(g > 0 for g in qrels.get(qid, {}).values())]
    return Dataset(_slug(folder.resolve().name), folder, queries, qrels, exclude_self=exclude_self)


def _doc_file(doc_id: str) -> str:
    return urllib.parse.quote(doc_id, safe="").replace(".", "%2E") + ".md"


def _doc_id(path: str) -> str:
    return urllib.parse.unquote(Path(path).stem)


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except FileNotFoundError:
        pass
    path.write_text(text, encoding="utf-8")


def _convert(dataset: Dataset, target: Path) -> int:
    """Write each document of the corpus as ``target/<id>.md``; skip when the corpus is unchanged."""
    corpus = dataset.folder / "corpus.jsonl"
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()
    stamp = target / ".corpus-sha256"
    if stamp.is_file() and stamp.read_text() == digest:
        return sum(1 for _ in target.glob("*.md"))
    target.mkdir(parents=True, exist_ok=True)
    wanted = set()
    with corpus.open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            title, text = (doc.get("title") or "").strip(), (doc.get("text") or "").strip()
            name = _doc_file(str(doc["_id"]))
            wanted.add(name)
            _write_if_changed(target / name, f"# {title}\n\n{text}\n" if title else f"{text}\n")
    for stale in target.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()
    stamp.write_text(digest)
    return len(wanted)


def monolith_name(datasets: Sequence[Dataset]) -> str:
    """The monolith wiki of this set of datasets (one per set, so several stay cached)."""
    names = ",".join(sorted(d.name for d in datasets))
    return f"{MONOLITH}-{hashlib.sha256(names.encode()).hexdigest()[:8]}"


def prepare(datasets: list[Dataset], cache: Path, progress: Callable[[str], None] | None = None,
            layers: Sequence[str] = ("bm25",)) -> Workspace:
    """Convert and build one wiki per dataset, plus the monolith wiki, in a cached workspace.

    With ``"dense"`` in ``layers`` every wiki gets the offline dense layer; the monolith reuses the
    datasets' vectors instead of embedding everything twice."""
    home, corpora = cache / "workspace", cache / "corpora"
    dense = "dense" in layers or any(  # once embedded, keep the layer (searching bm25 alone ignores it)
        "layers:" in (home / "wikis" / d.name / ".wiki.yaml").read_text()
        for d in datasets if (home / "wikis" / d.name / ".wiki.yaml").is_file())
    extra = {"layers": {"dense": {}}} if dense else {}
    names = [d.name for d in datasets]
    if len(set(names)) != len(names) or any(n.startswith(MONOLITH) for n in names):
        raise EvalError(f"dataset folder names must be distinct and not start with '{MONOLITH}': {names}: "
                        "rename or link the folders")
    for d in datasets:
        if progress:
            progress(f"converting {d.name}")
        d.docs = _convert(d, corpora / d.name)
        write_manifest(home / "wikis" / d.name, {
            "name": d.name, "title": d.name, "sensitivity": "public", "source": str(corpora / d.name),
            "chunking": EVAL_CHUNKING, **extra})
    others = sorted(p.name for p in corpora.iterdir() if p.is_dir() and p.name not in names)
    mono = monolith_name(datasets)
    write_manifest(home / "wikis" / mono, {
        "name": mono, "title": "all datasets in one wiki", "sensitivity": "public", "source": str(corpora),
        "chunking": EVAL_CHUNKING, "exclude": [f"{n}/*" for n in others], **extra})
    ws = Workspace(home, recheck_seconds=0)
    sources = []
    for name in [*names, mono]:
        if progress:
            progress(f"indexing {name}")
        report = index_mod.build(ws.wiki(name), vector_sources=sources)
        sources.append(ws.wiki(name).index_dir / "builds" / report.build_id / "dense")
    ws.rags_dir.mkdir(parents=True, exist_ok=True)
    _write_composition(ws, "eval-all", names)
    _write_composition(ws, "eval-monolith", [mono])
    for name in names:
        _write_composition(ws, f"eval-oracle-{name}", [name])
    return ws


def _write_composition(ws: Workspace, name: str, wikis: list[str]) -> None:
    data = {"name": name, "sensitivity": "public", "wikis": wikis}
    (ws.rags_dir / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def beir_doc(document: str) -> tuple[str, str]:
    """``wiki/file.md`` (or ``monolith-x/wiki/file.md``) → (dataset, BEIR document id)."""
    wiki, _, path = document.partition("/")
    if wiki.startswith(MONOLITH):
        wiki, _, path = path.partition("/")
    return wiki, _doc_id(path)
