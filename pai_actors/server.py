"""The pai_actors protocol server: ``open_server(runtime, authenticate=...)``, and the HTTP
endpoint for the AI SDK's ``useChat``: ``open_http_server(runtime, authenticate)``.

See ``docs/reference/protocol.md``, ``docs/reference/ui-message-stream.md`` and
``docs/guides/cli.md``. Every name here is re-exported from private modules.
"""

from ._http.server import HttpServer as HttpServer
from ._http.server import open_http_server as open_http_server
from ._protocol.frames import MAX_FRAME_BYTES as MAX_FRAME_BYTES
from ._protocol.frames import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._server.application import Application as Application
from ._server.application import ApplicationError as ApplicationError
from ._server.server import Authenticate as Authenticate
from ._server.server import Identity as Identity
from ._server.server import Server as Server
from ._server.server import ServerStatistics as ServerStatistics
from ._server.server import open_server as open_server

__all__ = [
    "MAX_FRAME_BYTES",
    "PROTOCOL_VERSION",
    "Application",
    "ApplicationError",
    "Authenticate",
    "HttpServer",
    "Identity",
    "Server",
    "ServerStatistics",
    "open_http_server",
    "open_server",
]

for _name in (
    "Application",
    "ApplicationError",
    "HttpServer",
    "Identity",
    "Server",
    "ServerStatistics",
    "open_http_server",
    "open_server",
):
    globals()[_name].__module__ = __name__
del _name
