"""The tool author's surface: what a tool is and what its ``execute`` receives.

Definitions (``define_tool``, ``ToolDefinition``, registrations, agents) and what a runtime
hands a call: ``ToolContext`` with its ``AbortSignal``, ``ctx.tools`` (``ToolCallMap``),
``ctx.files`` (``ScopedFiles``), ``ctx.agents`` (``AgentRunner``), capabilities and the
pending-action view. It may use trio, and builds on the core and the ``Store`` protocol;
the services it hands out reach the runtime only through callables the runtime gives them,
never by importing it.
"""
