"""The trading desk from synchronous code: ``pai_actors.threaded`` runs the runtime on its own
thread, and every method returns a ``ThreadedFuture[T]`` whose ``.get()`` is typed ``T``.

Run it: ``python examples/trading_sync.py``.
"""

from __future__ import annotations

from trading_desk import Approval, open_runtime

from pai_actors import threaded


def main() -> None:
    with threaded.start(open_runtime) as rt:
        thread_id: str = rt.create_thread("acme").get(timeout=10)
        rt.send(thread_id, "buy 10 ACME").get(timeout=10)
        rt.wait_idle(thread_id, timeout=10).get()
        [action] = rt.pending_actions(thread_id).get(timeout=10)
        shown = Approval.model_validate(action.input)  # JSON on the wire: parse it to read it
        print(action.name, shown.total, shown.limit)
        print(action.submit({"approved": False, "note": "over budget"}).get(timeout=10).status)
        rt.wait_idle(thread_id, timeout=10).get()
        state = rt.get_state(thread_id).get(timeout=10)
        part = state.messages[1].tool_parts[0]  # a ToolPart
        print("run", state.runs[-1].status, part.state, part.error_text)


if __name__ == "__main__":
    main()
