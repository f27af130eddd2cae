"""The HTTP server of the AI SDK's UI message stream protocol.

``ui_stream`` and ``turn`` are the sans-IO mapping (a thread's wire messages as UI messages;
a turn's frames as chunks), ``response`` streams a turn as server-sent events, ``app`` is
the ASGI app (starlette) and ``server`` serves it under trio (hypercorn). It reads threads
through the protocol server's feeds and checks identities as it does, so it sits above
``_server``. See ``docs/reference/ui-message-stream.md``.
"""
