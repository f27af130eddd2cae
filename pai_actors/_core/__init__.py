"""The pure core: values, definitions of records and schemas, and the transitions of a tool
call, with no I/O.

Errors, JSON values, ids and the wire base model; JSON Schema compilation; message parts,
run and thread states, pending-action refs; the call record and its pure transitions
(``calls``), stored records, the model's messages and a step's accumulation, notifications.
Everything here is a function of its arguments: it imports no trio, no ``supervisors``, no
sqlite3, pykka or threads (an import-linter contract in ``pyproject.toml`` keeps it so), which
is what makes it cheap to test exhaustively. It imports nothing else of ``pai_actors``.
"""
