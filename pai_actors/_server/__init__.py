"""The WebSocket server of the client protocol: the connection handler (``server``), each
connection's feeds of watched threads and actions (``feeds``), and the application factory
``pai-actors serve`` loads (``application``). Uses the runtime's public methods and the
protocol's frames.
"""
