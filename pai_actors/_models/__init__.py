"""Model adapters: the :class:`~pai_actors.Model` protocol over real providers' wire formats.

Each adapter is built on the provider's official SDK (installed with an optional extra) and
is split the house way: a pure mapping of a :class:`~pai_actors.ModelRequest` to the
provider's request (``to_*_request``), a sans-IO reader that turns the provider's stream
events into :data:`~pai_actors.ModelEvent`\\ s (``*StreamReader.feed``), and a thin trio
shell (``*Model.stream``) that sends the request through the SDK, feeds the reader and
turns the SDK's failures into :class:`~pai_actors.ModelProviderError` (``faults``).

- ``openai_chat``: OpenAI Chat Completions, and every OpenAI-compatible server;
- ``openai_responses``: the OpenAI Responses API;
- ``anthropic``: the Anthropic Messages API;
- ``spec``: ``model_from_spec("openai:gpt-4.1-mini")``;
- ``clients``: one SDK client per adapter and trio run, closed when the run ends;
- ``faults``: provider errors, with API keys kept out of every text;
- ``common``: what the readers share (tool-call input, finish reasons).

This package imports only ``pai_actors._core`` (and trio and the SDKs); the public names
are in :mod:`pai_actors.models`.
"""
