"""An external world (ppol's JSONL protocol, version 1) whose harness records what ppol's own
agent never writes: a call left without its result (task ``unanswered``), a tool result that
answers no call (task ``orphan``), and, without tool schemas, one argument written as a number
in one call and a string in another, and a date string, which ``datasets`` 4 reads as a
timestamp (task ``mixed``). Used by ``test_toolkits.py``:

    ppol episodes --world "external:python3 broken_world.py" --task-file tasks.jsonl -o eps.jsonl
"""

import json
import sys

HI = {"role": "assistant", "content": "Hi! How can I help you today?"}


def call(cid, ref, **more):
    return {"role": "assistant", "content": "", "tool_calls": [{"id": cid, "name": "lookup", "arguments": {"ref": ref, **more}}]}


def dialogue(task):
    user = {"role": "user", "content": "Where is my parcel?"}
    if task == "unanswered":
        return [HI, user, call("x", "A5"), {"role": "user", "content": "hello??"}, {"role": "assistant", "content": "It is on its way."}]
    if task == "orphan":
        return [HI, user, {"role": "tool", "tool_call_id": "zz", "content": "parcel A5: in transit"},
                {"role": "assistant", "content": "It is on its way."}]
    return [HI, user, call("a", 5), {"role": "tool", "tool_call_id": "a", "content": "no parcel 5"},
            {"role": "assistant", "content": "Which reference exactly?"}, {"role": "user", "content": "A5"},
            call("b", "A5", since="2024-05-21"), {"role": "tool", "tool_call_id": "b", "content": "parcel A5: in transit"},
            {"role": "assistant", "content": "Parcel A5 is in transit."}]


def main():
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("type") == "shutdown":
            break
        out = {"type": "dialogue", "id": req["id"], "task_id": req["task_id"], "conversation": dialogue(req["task_id"]), "reward": 1.0}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
