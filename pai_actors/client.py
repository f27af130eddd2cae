"""The Python client of the pai_actors protocol: ``open_client(url, token=...)``.

See ``docs/guides/client.md``. Every name here is re-exported from private modules.
"""

from ._client.client import CLIENT_MAX_FRAME_BYTES as CLIENT_MAX_FRAME_BYTES
from ._client.client import Client as Client
from ._client.client import FileDownload as FileDownload
from ._client.client import open_client as open_client
from ._client.conversation import ClientThread as ClientThread
from ._client.conversation import ClientWatch as ClientWatch
from ._client.conversation import ThreadResynced as ThreadResynced
from ._client.errors import AuthenticationFailed as AuthenticationFailed
from ._client.errors import ClientError as ClientError
from ._client.errors import ConnectionLost as ConnectionLost
from ._client.errors import ServerError as ServerError
from ._core.pending import PendingActionView as PendingActionView

__all__ = [
    "CLIENT_MAX_FRAME_BYTES",
    "AuthenticationFailed",
    "Client",
    "ClientError",
    "ClientThread",
    "ClientWatch",
    "ConnectionLost",
    "FileDownload",
    "PendingActionView",
    "ServerError",
    "ThreadResynced",
    "open_client",
]

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("pai_actors._") and _name != "PendingActionView":
        _obj.__module__ = __name__
del _name, _obj
