"""Talking to any language model through LiteLLM, streamed, with failures turned into clear messages.

LiteLLM is imported lazily (it takes seconds) and with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` so that
it never fetches its price list from the internet. Keys come from the providers' usual environment
variables (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, …); ``api_base`` points at a self-hosted
OpenAI-compatible server (Ollama, vLLM, llama.cpp).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import ContextTooLong, ModelError

DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRIES = 2


def litellm_module():
    """Import litellm offline-safely (no cost-map download, no feedback banners)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


@dataclass
class Usage:
    """Token counts and cost of one call, when the provider or LiteLLM knows them."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None


def _where(model: str, api_base: str | None) -> str:
    return f"{model} at {api_base}" if api_base else model


def _explain(exc: Exception, model: str, api_base: str | None) -> ModelError:
    """Map a LiteLLM exception to a ModelError with the fix."""
    litellm = litellm_module()
    where = _where(model, api_base)
    detail = " ".join(str(exc).split())[:300]
    if isinstance(exc, litellm.ContextWindowExceededError):
        return ContextTooLong(f"the question and passages do not fit the context window of {where}")
    if isinstance(exc, litellm.AuthenticationError | litellm.PermissionDeniedError):
        return ModelError(f"{where} refused the API key: check the provider's key variable "
                          f"(e.g. OPENAI_API_KEY) ({detail})")
    if isinstance(exc, litellm.RateLimitError):
        return ModelError(f"{where} is rate-limiting requests (retried {DEFAULT_RETRIES} times): "
                          f"wait a minute or use another model ({detail})")
    if isinstance(exc, litellm.Timeout | litellm.APIConnectionError | litellm.ServiceUnavailableError
                  | litellm.InternalServerError | litellm.BadGatewayError):
        return ModelError(f"cannot reach {where}: is the server running and the address right? ({detail})")
    if isinstance(exc, litellm.NotFoundError):
        return ModelError(f"model {where} was not found: check the model name ({detail})")
    if isinstance(exc, litellm.BadRequestError | litellm.UnprocessableEntityError):
        if "context" in detail.lower() and ("length" in detail.lower() or "window" in detail.lower()):
            return ContextTooLong(f"the question and passages do not fit the context window of {where}")
        return ModelError(f"{where} rejected the request: {detail}")
    return ModelError(f"{where} failed: {type(exc).__name__}: {detail}")


def check_keys(model: str, api_base: str | None) -> None:
    """Fail early, before any network call, when a hosted model's key variable is not set."""
    if api_base:
        return
    litellm = litellm_module()
    try:
        missing = litellm.validate_environment(model).get("missing_keys") or []
    except Exception:  # noqa: BLE001 - an unknown provider: let the call itself explain
        return
    if missing:
        raise ModelError(f"model {model} needs {', '.join(missing)} in the environment: set it, "
                         f"or pick another model with --model (e.g. 'extractive', which needs no key)")


class ChatStream:
    """Iterate to receive the answer's text as it is generated; ``usage`` is filled at the end.

    Failures (also in mid-stream) raise :class:`ModelError` with a clear message.
    """

    def __init__(self, model: str, messages: list[dict[str, str]], *, api_base: str | None = None,
                 api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES,
                 max_tokens: int | None = None, extra_body: dict | None = None):
        self.model, self.messages, self.api_base, self.api_key = model, messages, api_base, api_key
        self.timeout, self.retries, self.max_tokens, self.extra_body = timeout, retries, max_tokens, extra_body
        self.usage = Usage()

    def __iter__(self) -> Iterator[str]:
        litellm = litellm_module()
        kwargs = {"model": self.model, "messages": self.messages, "stream": True, "temperature": 0,
                  "timeout": self.timeout, "num_retries": self.retries,
                  "stream_options": {"include_usage": True}}
        for key in ("api_base", "api_key", "max_tokens", "extra_body"):
            if getattr(self, key) is not None:
                kwargs[key] = getattr(self, key)
        chunks = []
        try:
            for chunk in litellm.completion(**kwargs):
                chunks.append(chunk)
                delta = chunk.choices[0].delta.content if chunk.choices else None
                if delta:
                    yield delta
        except ModelError:
            raise
        except Exception as exc:  # noqa: BLE001 - every provider failure becomes one clear message
            raise _explain(exc, self.model, self.api_base) from None
        self.usage = self._usage(litellm, chunks)

    def _usage(self, litellm, chunks: list) -> Usage:
        usage = next((c.usage for c in reversed(chunks) if getattr(c, "usage", None)), None)
        result = Usage(getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None))
        if result.prompt_tokens is not None and not self.api_base:
            try:
                prompt_cost, completion_cost = litellm.cost_per_token(
                    model=self.model, prompt_tokens=result.prompt_tokens,
                    completion_tokens=result.completion_tokens or 0)
                result.cost = prompt_cost + completion_cost
            except Exception:  # noqa: BLE001, S110 - LiteLLM does not know this model's price
                pass
        return result
