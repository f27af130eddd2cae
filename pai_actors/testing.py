"""Test helpers for applications built on :mod:`pai_actors`: part of the product, not an extra.

This module grows with the runtime. Today it holds the scripted model:

- :class:`ScriptedModel` plays back scripted model steps and records every
  :class:`~pai_actors.ModelRequest` it receives (``model.requests``);
- :func:`tool_call` and :func:`text` build the steps;
- :class:`ScriptedModelError` is raised when a step cannot be played (no step left, a call to
  a tool the request did not offer, a malformed step).

``create_test_runtime(agent, model=...)``, which runs an agent on the production code paths
with a scripted model, comes with the runtime; fault injection helpers will follow.
"""

from ._errors import ScriptedModelError as ScriptedModelError
from ._scripted_model import ScriptedModel as ScriptedModel
from ._scripted_model import ScriptedText as ScriptedText
from ._scripted_model import ScriptedToolCall as ScriptedToolCall
from ._scripted_model import text as text
from ._scripted_model import tool_call as tool_call

__all__ = [
    "ScriptedModel",
    "ScriptedModelError",
    "ScriptedText",
    "ScriptedToolCall",
    "text",
    "tool_call",
]

for _name in __all__:
    globals()[_name].__module__ = __name__  # tracebacks read pai_actors.testing.ScriptedModel
del _name
