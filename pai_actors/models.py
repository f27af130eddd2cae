"""Real models: adapters of the :class:`~pai_actors.Model` protocol for provider APIs.

- :class:`OpenAIChatModel`: OpenAI Chat Completions, and every OpenAI-compatible server
  (vLLM, Ollama, llama.cpp, LM Studio, OpenRouter, ...) through ``base_url``;
- :class:`OpenAIResponsesModel`: the OpenAI Responses API;
- :class:`AnthropicModel`: the Anthropic Messages API;
- :func:`model_from_spec`: ``"openai:gpt-4.1-mini"``, ``"openai-responses:..."``,
  ``"anthropic:claude-..."``.

Each is built on the provider's official SDK, installed with an extra
(``pip install 'pai-actors[openai]'``, ``'pai-actors[anthropic]'``); importing this module
needs neither, making an adapter does. Keys and base URLs come from ``OPENAI_API_KEY``,
``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL`` unless given. A
provider failure raises :class:`~pai_actors.ModelProviderError`. See ``docs/models.md``.
"""

from ._core.errors import ModelProviderError as ModelProviderError
from ._models.anthropic import AnthropicModel as AnthropicModel
from ._models.base import ProviderModel as ProviderModel
from ._models.openai_chat import OpenAIChatModel as OpenAIChatModel
from ._models.openai_responses import OpenAIResponsesModel as OpenAIResponsesModel
from ._models.spec import model_from_spec as model_from_spec

__all__ = [
    "AnthropicModel",
    "ModelProviderError",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ProviderModel",
    "model_from_spec",
]

for _name in __all__:
    if _name != "ModelProviderError":  # exported by pai_actors as well; it reads pai_actors.*
        globals()[_name].__module__ = __name__  # tracebacks read pai_actors.models.OpenAIChatModel
del _name
