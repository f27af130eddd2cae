"""The client protocol's sans-IO half: frames (strict decoding and encoding of every message
the server and the client exchange) and the client's replica of a watched thread. No sockets
and no trio: the server and the client are the I/O around it. Builds on the core only.
"""
