"""The pure supervision decision core, public for tests, simulations and tools.

``decide(state, event) -> (state, commands)``: no trio, no clock, no I/O. Events carry the
time they happened; commands say what the trio shell (``Supervisor``) must do. See the
docstring of :func:`decide` and ``docs/design.md`` for the semantics.
"""

from ._decide import CancelRequested as CancelRequested
from ._decide import ChildState as ChildState
from ._decide import ChildStatus as ChildStatus
from ._decide import Command as Command
from ._decide import Event as Event
from ._decide import Exited as Exited
from ._decide import GiveUp as GiveUp
from ._decide import Restart as Restart
from ._decide import ShutdownRequested as ShutdownRequested
from ._decide import Spawn as Spawn
from ._decide import Start as Start
from ._decide import StopChild as StopChild
from ._decide import Strategy as Strategy
from ._decide import SupervisorConfig as SupervisorConfig
from ._decide import SupervisorState as SupervisorState
from ._decide import Terminate as Terminate
from ._decide import decide as decide

__all__ = [
    "CancelRequested",
    "ChildState",
    "ChildStatus",
    "Command",
    "Event",
    "Exited",
    "GiveUp",
    "Restart",
    "ShutdownRequested",
    "Spawn",
    "Start",
    "StopChild",
    "Strategy",
    "SupervisorConfig",
    "SupervisorState",
    "Terminate",
    "decide",
]
