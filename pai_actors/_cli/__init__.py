"""The ``pai-actors`` command: ``serve`` (``serve``), ``actions`` (``actions``) and ``demo``
(``demo``, ``protocol_demo``). The top layer: it may use everything below it.
"""

from .main import main as main
