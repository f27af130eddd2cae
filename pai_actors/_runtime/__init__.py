"""The actor runtime: ``AgentRuntime`` and the actors it supervises.

A run is an actor under the runtime's root supervisor and each tool call an actor under its
run (``run``); the model step and the call's writes (``run_io``), nested calls
(``children``), sub-agents (``subagents``), resolution of pending actions, loading and
recovery of threads, the watch hub. It is the only layer built on ``supervisors`` (through
its public API), and builds on the tools' surface, the stores and the core.
"""
