"""pai_actors: an actor-model runtime on trio for LLM agent tools that suspend and resume.

This release has the tool *definitions*: :func:`define_tool` checks a tool at construction
and returns an immutable :class:`ToolDefinition`; schemas are pydantic models, types pydantic
accepts, or raw JSON Schemas (:func:`json_schema`); :func:`to_json_value` normalises outputs
to lossless JSON; :func:`capability` makes capability tokens. :func:`define_agent` registers
tools under model-facing names (:class:`ToolRegistration` adds ``map_context`` / ``enabled``
policy) and :func:`create_pai` names several agents.
:func:`create_agent_runtime` runs an agent: an :class:`AgentRuntime` executes tools as
supervised actors (built on :mod:`supervisors`, the generic actor and supervision package
that ships beside this one), suspends them into pending actions
(:class:`PendingActionView`) and writes through the :class:`Store` protocol
(:class:`MemoryStore`, :class:`SqliteStore`).

A plain ``def`` ``execute`` runs in a worker thread under the runtime's limiter
(``create_agent_runtime(sync_tools=..., thread_limit=...)``, :class:`BlockingTools`);
:mod:`pai_actors.threaded` drives a runtime from synchronous code (it alone imports pykka).

Errors derive from :class:`PaiError` (the hierarchy is drawn in ``pai_actors._errors``).
"""

from ._acquire import Capabilities as Capabilities
from ._acquire import CapabilityRequest as CapabilityRequest
from ._actions import ActionResult as ActionResult
from ._actions import PendingActionOrigin as PendingActionOrigin
from ._actions import PendingActionRef as PendingActionRef
from ._agent import AgentDefinition as AgentDefinition
from ._agent import Pai as Pai
from ._agent import RuntimeScope as RuntimeScope
from ._agent import create_pai as create_pai
from ._agent import define_agent as define_agent
from ._agents import AgentRunner as AgentRunner
from ._agents import AgentRunResult as AgentRunResult
from ._blocking import DEFAULT_THREAD_LIMIT as DEFAULT_THREAD_LIMIT
from ._blocking import BlockingTools as BlockingTools
from ._blocking import BlockingToolStatistics as BlockingToolStatistics
from ._blocking import SyncTools as SyncTools
from ._capability import Capability as Capability
from ._capability import capability as capability
from ._children import BoundTool as BoundTool
from ._children import ToolCallMap as ToolCallMap
from ._context import AbortController as AbortController
from ._context import AbortSignal as AbortSignal
from ._context import InitialEntry as InitialEntry
from ._context import ResumeEntry as ResumeEntry
from ._context import ToolContext as ToolContext
from ._context import ToolDataWriter as ToolDataWriter
from ._context import ToolFailResult as ToolFailResult
from ._context import ToolSuspendResult as ToolSuspendResult
from ._context import ToolThread as ToolThread
from ._context import tool_failure_details as tool_failure_details
from ._create import create_agent_runtime as create_agent_runtime
from ._define_tool import define_tool as define_tool
from ._errors import AgentNotFound as AgentNotFound
from ._errors import AgentRunError as AgentRunError
from ._errors import DefinitionError as DefinitionError
from ._errors import FileNotFound as FileNotFound
from ._errors import FileTooLarge as FileTooLarge
from ._errors import InvalidTransition as InvalidTransition
from ._errors import MigrationRequired as MigrationRequired
from ._errors import ModelProtocolError as ModelProtocolError
from ._errors import OutputNotJSON as OutputNotJSON
from ._errors import PaiError as PaiError
from ._errors import RuntimeClosed as RuntimeClosed
from ._errors import RuntimeConfigError as RuntimeConfigError
from ._errors import SchemaError as SchemaError
from ._errors import StoreConflict as StoreConflict
from ._errors import StoreError as StoreError
from ._errors import ThreadBusy as ThreadBusy
from ._errors import ThreadNotFound as ThreadNotFound
from ._errors import ToolDefinitionError as ToolDefinitionError
from ._errors import ToolInvocationError as ToolInvocationError
from ._errors import ToolPreparationError as ToolPreparationError
from ._errors import ValidationFailed as ValidationFailed
from ._errors import ValidationIssue as ValidationIssue
from ._errors import WatchOverflow as WatchOverflow
from ._files import DEFAULT_MAX_FILE_BYTES as DEFAULT_MAX_FILE_BYTES
from ._files import ScopedFiles as ScopedFiles
from ._json import MAX_SAFE_INTEGER as MAX_SAFE_INTEGER
from ._json import JsonValue as JsonValue
from ._json import to_json_value as to_json_value
from ._memory_store import MemoryBacking as MemoryBacking
from ._memory_store import MemoryStore as MemoryStore
from ._model import Finish as Finish
from ._model import FinishReason as FinishReason
from ._model import Model as Model
from ._model import ModelAssistantMessage as ModelAssistantMessage
from ._model import ModelEvent as ModelEvent
from ._model import ModelMessage as ModelMessage
from ._model import ModelRequest as ModelRequest
from ._model import ModelSystemMessage as ModelSystemMessage
from ._model import ModelTextPart as ModelTextPart
from ._model import ModelTool as ModelTool
from ._model import ModelToolCallPart as ModelToolCallPart
from ._model import ModelToolMessage as ModelToolMessage
from ._model import ModelToolResultPart as ModelToolResultPart
from ._model import ModelUserMessage as ModelUserMessage
from ._model import TextDelta as TextDelta
from ._model import ToolCallEvent as ToolCallEvent
from ._model import ToolInputDelta as ToolInputDelta
from ._model import ToolInputStart as ToolInputStart
from ._model import ToolResultOutput as ToolResultOutput
from ._parts import CancelledInfo as CancelledInfo
from ._parts import Message as Message
from ._parts import SuspensionView as SuspensionView
from ._parts import TextPart as TextPart
from ._parts import ToolApproval as ToolApproval
from ._parts import ToolDataItem as ToolDataItem
from ._parts import ToolPart as ToolPart
from ._parts import get_tool_name as get_tool_name
from ._pending import PendingActionView as PendingActionView
from ._records import ClientToolRecord as ClientToolRecord
from ._records import OpenAction as OpenAction
from ._records import RunRecord as RunRecord
from ._records import StoredCall as StoredCall
from ._records import StoredFileBody as StoredFileBody
from ._records import StoreRecord as StoreRecord
from ._records import ThreadRecord as ThreadRecord
from ._records import UploadedFile as UploadedFile
from ._registration import ClientTool as ClientTool
from ._registration import ToolRegistration as ToolRegistration
from ._runtime import AgentRuntime as AgentRuntime
from ._schema import ToolSchema as ToolSchema
from ._schema import json_schema as json_schema
from ._sqlite_store import SqliteStore as SqliteStore
from ._state import RunState as RunState
from ._state import ThreadState as ThreadState
from ._store import Store as Store
from ._store import Transaction as Transaction
from ._tool import ChildToolInfo as ChildToolInfo
from ._tool import DescriptionContext as DescriptionContext
from ._tool import SuspendPoint as SuspendPoint
from ._tool import ToolConfig as ToolConfig
from ._tool import ToolDefinition as ToolDefinition
from ._tool import ToolWireSpec as ToolWireSpec
from ._watch import MessageAppended as MessageAppended
from ._watch import MessageReplaced as MessageReplaced
from ._watch import RunStatusChanged as RunStatusChanged
from ._watch import ThreadUpdate as ThreadUpdate
from ._watch import ThreadWatch as ThreadWatch
from ._watch import ToolDataUpdated as ToolDataUpdated
from ._watch import ToolPartUpdated as ToolPartUpdated

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_THREAD_LIMIT",
    "MAX_SAFE_INTEGER",
    "AbortController",
    "AbortSignal",
    "ActionResult",
    "AgentDefinition",
    "AgentNotFound",
    "AgentRunError",
    "AgentRunResult",
    "AgentRunner",
    "AgentRuntime",
    "BlockingToolStatistics",
    "BlockingTools",
    "BoundTool",
    "CancelledInfo",
    "Capabilities",
    "Capability",
    "CapabilityRequest",
    "ChildToolInfo",
    "ClientTool",
    "ClientToolRecord",
    "DefinitionError",
    "DescriptionContext",
    "FileNotFound",
    "FileTooLarge",
    "Finish",
    "FinishReason",
    "InitialEntry",
    "InvalidTransition",
    "JsonValue",
    "MemoryBacking",
    "MemoryStore",
    "Message",
    "MessageAppended",
    "MessageReplaced",
    "MigrationRequired",
    "Model",
    "ModelAssistantMessage",
    "ModelEvent",
    "ModelMessage",
    "ModelProtocolError",
    "ModelRequest",
    "ModelSystemMessage",
    "ModelTextPart",
    "ModelTool",
    "ModelToolCallPart",
    "ModelToolMessage",
    "ModelToolResultPart",
    "ModelUserMessage",
    "OpenAction",
    "OutputNotJSON",
    "Pai",
    "PaiError",
    "PendingActionOrigin",
    "PendingActionRef",
    "PendingActionView",
    "ResumeEntry",
    "RunRecord",
    "RunState",
    "RunStatusChanged",
    "RuntimeClosed",
    "RuntimeConfigError",
    "RuntimeScope",
    "SchemaError",
    "ScopedFiles",
    "SqliteStore",
    "Store",
    "StoreConflict",
    "StoreError",
    "StoreRecord",
    "StoredCall",
    "StoredFileBody",
    "SuspendPoint",
    "SuspensionView",
    "SyncTools",
    "TextDelta",
    "TextPart",
    "ThreadBusy",
    "ThreadNotFound",
    "ThreadRecord",
    "ThreadState",
    "ThreadUpdate",
    "ThreadWatch",
    "ToolApproval",
    "ToolCallEvent",
    "ToolCallMap",
    "ToolConfig",
    "ToolContext",
    "ToolDataItem",
    "ToolDataUpdated",
    "ToolDataWriter",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolFailResult",
    "ToolInputDelta",
    "ToolInputStart",
    "ToolInvocationError",
    "ToolPart",
    "ToolPartUpdated",
    "ToolPreparationError",
    "ToolRegistration",
    "ToolResultOutput",
    "ToolSchema",
    "ToolSuspendResult",
    "ToolThread",
    "ToolWireSpec",
    "Transaction",
    "UploadedFile",
    "ValidationFailed",
    "ValidationIssue",
    "WatchOverflow",
    "__version__",
    "capability",
    "create_agent_runtime",
    "create_pai",
    "define_agent",
    "define_tool",
    "get_tool_name",
    "json_schema",
    "to_json_value",
    "tool_failure_details",
]


def _fix_module_names() -> None:
    # Tracebacks and reprs read ``pai_actors.ToolDefinitionError``, not
    # ``pai_actors._errors.ToolDefinitionError``.
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith(f"{__name__}._"):
            try:
                obj.__module__ = __name__
            except (AttributeError, TypeError):  # type aliases and builtins refuse it
                pass


_fix_module_names()
del _fix_module_names
