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

Errors derive from :class:`PaiError` (the hierarchy is drawn in ``pai_actors._core.errors``).
"""

from ._core.actions import ActionResult as ActionResult
from ._core.actions import PendingActionOrigin as PendingActionOrigin
from ._core.actions import PendingActionRef as PendingActionRef
from ._core.actions import SubAgentOrigin as SubAgentOrigin
from ._core.capability import Capability as Capability
from ._core.capability import capability as capability
from ._core.client_tool import ClientTool as ClientTool
from ._core.deadlines import DEADLINE_REASON as DEADLINE_REASON
from ._core.deadlines import CancelAtDeadline as CancelAtDeadline
from ._core.deadlines import FailAtDeadline as FailAtDeadline
from ._core.deadlines import OnDeadline as OnDeadline
from ._core.deadlines import ResolveAtDeadline as ResolveAtDeadline
from ._core.errors import AgentNotFound as AgentNotFound
from ._core.errors import AgentRunError as AgentRunError
from ._core.errors import DefinitionError as DefinitionError
from ._core.errors import FileNotFound as FileNotFound
from ._core.errors import FileTooLarge as FileTooLarge
from ._core.errors import InvalidTransition as InvalidTransition
from ._core.errors import MigrationRequired as MigrationRequired
from ._core.errors import ModelProtocolError as ModelProtocolError
from ._core.errors import ModelProviderError as ModelProviderError
from ._core.errors import OutputNotJSON as OutputNotJSON
from ._core.errors import PaiError as PaiError
from ._core.errors import RuntimeClosed as RuntimeClosed
from ._core.errors import RuntimeConfigError as RuntimeConfigError
from ._core.errors import SchemaError as SchemaError
from ._core.errors import StoreConflict as StoreConflict
from ._core.errors import StoreError as StoreError
from ._core.errors import ThreadBusy as ThreadBusy
from ._core.errors import ThreadNotFound as ThreadNotFound
from ._core.errors import ThreadOwnedElsewhere as ThreadOwnedElsewhere
from ._core.errors import ToolDefinitionError as ToolDefinitionError
from ._core.errors import ToolInvocationError as ToolInvocationError
from ._core.errors import ToolPreparationError as ToolPreparationError
from ._core.errors import ValidationFailed as ValidationFailed
from ._core.errors import ValidationIssue as ValidationIssue
from ._core.errors import WatchOverflow as WatchOverflow
from ._core.json import MAX_SAFE_INTEGER as MAX_SAFE_INTEGER
from ._core.json import JsonValue as JsonValue
from ._core.json import to_json_value as to_json_value
from ._core.model import Finish as Finish
from ._core.model import FinishReason as FinishReason
from ._core.model import Model as Model
from ._core.model import ModelAssistantMessage as ModelAssistantMessage
from ._core.model import ModelEvent as ModelEvent
from ._core.model import ModelFilePart as ModelFilePart
from ._core.model import ModelMessage as ModelMessage
from ._core.model import ModelReasoningPart as ModelReasoningPart
from ._core.model import ModelRequest as ModelRequest
from ._core.model import ModelSettings as ModelSettings
from ._core.model import ModelSystemMessage as ModelSystemMessage
from ._core.model import ModelTextPart as ModelTextPart
from ._core.model import ModelTool as ModelTool
from ._core.model import ModelToolCallPart as ModelToolCallPart
from ._core.model import ModelToolMessage as ModelToolMessage
from ._core.model import ModelToolResultPart as ModelToolResultPart
from ._core.model import ModelUserMessage as ModelUserMessage
from ._core.model import ProviderMetadata as ProviderMetadata
from ._core.model import ReasoningDelta as ReasoningDelta
from ._core.model import ReasoningEnd as ReasoningEnd
from ._core.model import TextDelta as TextDelta
from ._core.model import ToolCallEvent as ToolCallEvent
from ._core.model import ToolInputDelta as ToolInputDelta
from ._core.model import ToolInputStart as ToolInputStart
from ._core.model import ToolResultOutput as ToolResultOutput
from ._core.model import Usage as Usage
from ._core.parts import CancelledInfo as CancelledInfo
from ._core.parts import FilePart as FilePart
from ._core.parts import Message as Message
from ._core.parts import ReasoningPart as ReasoningPart
from ._core.parts import StepStartPart as StepStartPart
from ._core.parts import SuspensionView as SuspensionView
from ._core.parts import TextPart as TextPart
from ._core.parts import ToolApproval as ToolApproval
from ._core.parts import ToolDataItem as ToolDataItem
from ._core.parts import ToolPart as ToolPart
from ._core.parts import get_tool_name as get_tool_name
from ._core.parts import message_steps as message_steps
from ._core.pending import PendingActionView as PendingActionView
from ._core.records import ClientToolRecord as ClientToolRecord
from ._core.records import OpenAction as OpenAction
from ._core.records import RunRecord as RunRecord
from ._core.records import StoredCall as StoredCall
from ._core.records import StoredFileBody as StoredFileBody
from ._core.records import StoreRecord as StoreRecord
from ._core.records import ThreadParent as ThreadParent
from ._core.records import ThreadRecord as ThreadRecord
from ._core.records import UploadedFile as UploadedFile
from ._core.schema import ToolSchema as ToolSchema
from ._core.schema import json_schema as json_schema
from ._core.state import RunState as RunState
from ._core.state import ThreadState as ThreadState
from ._core.updates import MessageAppended as MessageAppended
from ._core.updates import MessageDelta as MessageDelta
from ._core.updates import MessageReplaced as MessageReplaced
from ._core.updates import RunStatusChanged as RunStatusChanged
from ._core.updates import ThreadUpdate as ThreadUpdate
from ._core.updates import ThreadUpdateOrDelta as ThreadUpdateOrDelta
from ._core.updates import ToolDataUpdated as ToolDataUpdated
from ._core.updates import ToolPartUpdated as ToolPartUpdated
from ._runtime.create import create_agent_runtime as create_agent_runtime
from ._runtime.runtime import AgentRuntime as AgentRuntime
from ._runtime.watch import ThreadWatch as ThreadWatch
from ._store.base import Store as Store
from ._store.base import Transaction as Transaction
from ._store.memory import MemoryBacking as MemoryBacking
from ._store.memory import MemoryStore as MemoryStore
from ._store.postgres import PostgresStore as PostgresStore
from ._store.sqlite import SqliteStore as SqliteStore
from ._tools.agent import AgentDefinition as AgentDefinition
from ._tools.agent import Pai as Pai
from ._tools.agent import RuntimeScope as RuntimeScope
from ._tools.agent import create_pai as create_pai
from ._tools.agent import define_agent as define_agent
from ._tools.agent_runner import AgentRunner as AgentRunner
from ._tools.agent_runner import AgentRunResult as AgentRunResult
from ._tools.blocking import DEFAULT_THREAD_LIMIT as DEFAULT_THREAD_LIMIT
from ._tools.blocking import BlockingTools as BlockingTools
from ._tools.blocking import BlockingToolStatistics as BlockingToolStatistics
from ._tools.blocking import SyncTools as SyncTools
from ._tools.capabilities import Capabilities as Capabilities
from ._tools.capabilities import CapabilityRequest as CapabilityRequest
from ._tools.context import AbortController as AbortController
from ._tools.context import AbortSignal as AbortSignal
from ._tools.context import InitialEntry as InitialEntry
from ._tools.context import ResumeEntry as ResumeEntry
from ._tools.context import ToolContext as ToolContext
from ._tools.context import ToolDataWriter as ToolDataWriter
from ._tools.context import ToolFailResult as ToolFailResult
from ._tools.context import ToolSuspendResult as ToolSuspendResult
from ._tools.context import ToolThread as ToolThread
from ._tools.context import tool_failure_details as tool_failure_details
from ._tools.define_tool import define_tool as define_tool
from ._tools.files import DEFAULT_MAX_FILE_BYTES as DEFAULT_MAX_FILE_BYTES
from ._tools.files import ScopedFiles as ScopedFiles
from ._tools.registration import ToolRegistration as ToolRegistration
from ._tools.tool import ChildToolInfo as ChildToolInfo
from ._tools.tool import DescriptionContext as DescriptionContext
from ._tools.tool import SuspendPoint as SuspendPoint
from ._tools.tool import ToolConfig as ToolConfig
from ._tools.tool import ToolDefinition as ToolDefinition
from ._tools.tool import ToolWireSpec as ToolWireSpec
from ._tools.tool_calls import BoundTool as BoundTool
from ._tools.tool_calls import ToolCallMap as ToolCallMap

__version__ = "0.1.0"

__all__ = [
    "DEADLINE_REASON",
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
    "CancelAtDeadline",
    "CancelledInfo",
    "Capabilities",
    "Capability",
    "CapabilityRequest",
    "ChildToolInfo",
    "ClientTool",
    "ClientToolRecord",
    "DefinitionError",
    "DescriptionContext",
    "FailAtDeadline",
    "FileNotFound",
    "FilePart",
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
    "MessageDelta",
    "MessageReplaced",
    "MigrationRequired",
    "Model",
    "ModelAssistantMessage",
    "ModelEvent",
    "ModelFilePart",
    "ModelMessage",
    "ModelProtocolError",
    "ModelProviderError",
    "ModelReasoningPart",
    "ModelRequest",
    "ModelSettings",
    "ModelSystemMessage",
    "ModelTextPart",
    "ModelTool",
    "ModelToolCallPart",
    "ModelToolMessage",
    "ModelToolResultPart",
    "ModelUserMessage",
    "OnDeadline",
    "OpenAction",
    "OutputNotJSON",
    "Pai",
    "PaiError",
    "PendingActionOrigin",
    "PendingActionRef",
    "PendingActionView",
    "PostgresStore",
    "ProviderMetadata",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningPart",
    "ResolveAtDeadline",
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
    "StepStartPart",
    "Store",
    "StoreConflict",
    "StoreError",
    "StoreRecord",
    "StoredCall",
    "StoredFileBody",
    "SubAgentOrigin",
    "SuspendPoint",
    "SuspensionView",
    "SyncTools",
    "TextDelta",
    "TextPart",
    "ThreadBusy",
    "ThreadNotFound",
    "ThreadOwnedElsewhere",
    "ThreadParent",
    "ThreadRecord",
    "ThreadState",
    "ThreadUpdate",
    "ThreadUpdateOrDelta",
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
    "Usage",
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
    "message_steps",
    "to_json_value",
    "tool_failure_details",
]


def _fix_module_names() -> None:
    # Tracebacks and reprs read ``pai_actors.ToolDefinitionError``, not
    # ``pai_actors._core.errors.ToolDefinitionError``.
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith(f"{__name__}._"):
            try:
                obj.__module__ = __name__
            except (AttributeError, TypeError):  # type aliases and builtins refuse it
                pass


_fix_module_names()
del _fix_module_names
