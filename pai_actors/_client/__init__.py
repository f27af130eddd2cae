"""The Python client of the client protocol: the connection (``client``), a watched
conversation (``conversation``), the client's errors. It needs no runtime, store or server:
the protocol's frames, the core and the pending-action view are all it builds on.
"""
