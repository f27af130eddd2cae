"""pai_actors: an actor-model runtime on trio for LLM agent tools that suspend and resume.

The tool runtime (``define_tool``, pending actions, agents) is built on :mod:`supervisors`;
this release ships the supervision foundation and the ``pai-actors`` command.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
