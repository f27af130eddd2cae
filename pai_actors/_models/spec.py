"""``model_from_spec``: a model adapter from a short spec string.

``"<provider>:<model>"``: ``openai:`` (:class:`OpenAIChatModel`), ``openai-responses:``
(:class:`OpenAIResponsesModel`), ``anthropic:`` (:class:`AnthropicModel`). Keys and base
URLs come from the environment unless given as keyword arguments.
"""

from __future__ import annotations

from typing import Any

from .._core.errors import DefinitionError
from .anthropic import AnthropicModel
from .base import ProviderModel
from .openai_chat import OpenAIChatModel
from .openai_responses import OpenAIResponsesModel

PROVIDERS: dict[str, type[ProviderModel]] = {
    "openai": OpenAIChatModel,
    "openai-responses": OpenAIResponsesModel,
    "anthropic": AnthropicModel,
}


def model_from_spec(spec: str, **options: Any) -> ProviderModel:
    """The adapter ``spec`` names, e.g. ``model_from_spec("openai:gpt-4.1-mini")`` or
    ``model_from_spec("anthropic:claude-sonnet-4-5", max_tokens=2048)``; ``options`` are
    the adapter's keyword arguments (``base_url``, ``api_key``, ``temperature``, ...).
    A spec that names no known provider raises :class:`~pai_actors.DefinitionError`."""
    known = ", ".join(f"'{name}:<model>'" for name in PROVIDERS)
    if not isinstance(spec, str) or ":" not in spec:
        raise DefinitionError(
            f"model spec {spec!r} is not '<provider>:<model>'; use one of {known}"
        )
    provider, _, model = spec.partition(":")
    adapter = PROVIDERS.get(provider.strip().lower())
    if adapter is None:
        raise DefinitionError(
            f"model spec {spec!r} names the unknown provider {provider!r}; use one of {known} "
            "(an OpenAI-compatible server is 'openai:<model>' with base_url=...)"
        )
    if not model.strip():
        raise DefinitionError(f"model spec {spec!r} has no model name after {provider + ':'!r}")
    return adapter(model.strip(), **options)
