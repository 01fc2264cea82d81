"""Rows of ``ppol export sft`` as chat-template inputs.

Standard library only (no ``ppol_rs`` extension needed), so it can be copied into a training
environment. :func:`chat_template_inputs` turns a row of an ``openai``, ``hf`` or
``llamafactory`` export, as read from the file or from ``datasets.load_dataset("json", ...)``,
into ``(messages, tools)`` for ``tokenizer.apply_chat_template(messages, tools=tools)``:

>>> row = {"messages": [{"role": "user", "content": "find W1"},
...     {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
...      "function": {"name": "find", "arguments": {"id": "W1", "zip": None}}}]},
...     {"role": "tool", "tool_call_id": "c", "name": "find", "content": "ok", "tool_calls": None}],
...     "tools": [{"type": "function", "function": {"name": "find", "parameters": {}}}]}
>>> messages, tools = chat_template_inputs(row)
>>> messages[1]["tool_calls"][0]["function"]["arguments"], "tool_calls" in messages[2]
({'id': 'W1'}, False)

``datasets`` 4.x (LLaMA-Factory 0.9.5 pins ``datasets<=4.0.0``) reads the ``hf`` and
``openai`` rows into one Arrow struct per column: every tool call's ``arguments`` gets the keys
of all tools' arguments, and every message every message key, padded with ``None``.
:func:`strip_nulls` removes them, as TRL's ``SFTTrainer`` does (``remove_none_values``); an
argument that was ``null`` in the episode is removed too. ``datasets`` 5 reads the rows back
exactly.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["chat_template_inputs", "strip_nulls", "LLAMAFACTORY_RESULT_SEPARATOR"]

#: How an ``llamafactory`` observation joins the results of several calls of one agent turn.
LLAMAFACTORY_RESULT_SEPARATOR = "\n</tool_response>\n<tool_response>\n"


def strip_nulls(value: Any) -> Any:
    """``value`` with every ``None``-valued key of its dicts removed, recursively."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def _schemas(tools: Any) -> Optional[List[Dict[str, Any]]]:
    if tools is None or tools == "" or tools == []:
        return None
    if isinstance(tools, str):  # hf layout 1 and llamafactory: one JSON string
        tools = json.loads(tools)
    # llamafactory schemas are bare {"name", "description", "parameters"}
    return [t if t.get("type") == "function" else {"type": "function", "function": t} for t in tools]


def _arguments(args: Any) -> Any:
    return json.loads(args) if isinstance(args, str) else args


def _from_llamafactory(row: Dict[str, Any]) -> List[Dict[str, Any]]:
    messages: List[Dict[str, Any]] = []
    if row.get("system"):
        messages.append({"role": "system", "content": row["system"]})
    pending: List[Tuple[str, str]] = []
    n = 0
    for turn in row["conversations"]:
        who, value = turn["from"], turn["value"]
        if who == "human":
            messages.append({"role": "user", "content": value})
        elif who == "gpt":
            messages.append({"role": "assistant", "content": value})
        elif who == "function_call":
            calls = json.loads(value)
            calls = calls if isinstance(calls, list) else [calls]
            tool_calls = []
            for c in calls:
                n += 1
                tool_calls.append({"id": f"call_{n}", "type": "function",
                                   "function": {"name": c["name"], "arguments": _arguments(c["arguments"])}})
                pending.append((f"call_{n}", c["name"]))
            messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
        elif who == "observation":
            results = value.split(LLAMAFACTORY_RESULT_SEPARATOR) if len(pending) > 1 else [value]
            if len(results) != len(pending):
                raise ValueError(f"an observation holds {len(results)} results for {len(pending)} calls")
            for (call_id, name), content in zip(pending, results):
                messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
            pending = []
        else:
            raise ValueError(f"unknown ShareGPT role {who!r}")
    return messages


def chat_template_inputs(row: Dict[str, Any]) -> Tuple[List[Dict[str, Any]], Optional[List[Dict[str, Any]]]]:
    """``(messages, tools)`` of one exported row (``openai``, ``hf`` or ``llamafactory``), for
    ``tokenizer.apply_chat_template(messages, tools=tools)``: Arrow's ``None`` padding removed,
    tool schemas as a list of objects, tool-call ``arguments`` as objects (``openai`` writes
    JSON strings), ``llamafactory``'s ShareGPT turns as OpenAI-style messages."""
    row = strip_nulls(dict(row))
    if "conversations" in row:
        return _from_llamafactory(row), _schemas(row.get("tools"))
    messages = []
    for m in row["messages"]:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _arguments(c["function"]["arguments"])}}
                for c in m["tool_calls"]
            ]
        messages.append(m)
    return messages, _schemas(row.get("tools"))
