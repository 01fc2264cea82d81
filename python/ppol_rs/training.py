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

:func:`chat_template` is the tools-aware ChatML template shipped in ``ppol_rs/templates/``
(``{% generation %}`` markers around what the agent writes, for
``assistant_only_loss=True``); :func:`loss_tokens` counts the tokens it puts the loss on.

``datasets`` 4.x (LLaMA-Factory 0.9.5 pins ``datasets<=4.0.0``) reads the ``hf`` and
``openai`` rows into one Arrow struct per column: every tool call's ``arguments`` gets the keys
of all tools' arguments, and every message every message key, padded with ``None``.
:func:`strip_nulls` removes them, as TRL's ``SFTTrainer`` does (``remove_none_values``); an
argument that was ``null`` in the episode is removed too. ``datasets`` 5 reads the rows back
exactly.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any, Dict, List, Optional, Tuple

__all__ = [
    "chat_template",
    "chat_template_inputs",
    "from_arrow",
    "loss_tokens",
    "strip_nulls",
    "LLAMAFACTORY_RESULT_SEPARATOR",
    "RAW_ARGUMENTS_KEY",
    "TEMPLATES",
]

#: What ``ppol export sft --bad-calls keep`` writes arguments that are not a JSON object under.
RAW_ARGUMENTS_KEY = "_raw_arguments"

#: The directory of the chat templates shipped with ppol_rs (copy it along with this file).
TEMPLATES = pathlib.Path(__file__).resolve().parent / "templates"


def chat_template(name: str = "chatml_tools") -> str:
    """The text of a chat template shipped in :data:`TEMPLATES`: ``chatml_tools`` is ChatML with
    Hermes / Qwen2.5 tool calls (the same text as LLaMA-Factory's ``template: qwen``) whose
    ``{% generation %}`` markers enclose what the agent writes — its text, its calls and its
    ``<|im_end|>`` — so that ``SFTConfig(assistant_only_loss=True)`` (TRL) and
    ``apply_chat_template(..., return_assistant_tokens_mask=True)`` put the loss there and on
    nothing else (not the system prompt, the tool schemas, the user's turns or the tool
    results). An assistant message with ``"weight": 0`` is rendered outside the markers.

    >>> "generation %}" in chat_template() and "endgeneration %}" in chat_template()
    True
    """
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


def loss_tokens(tokenizer: Any, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]] = None,
                template: Optional[str] = None) -> Tuple[int, int]:
    """``(tokens that carry loss, tokens)`` of one conversation rendered with ``template``
    (default :func:`chat_template`) by ``tokenizer`` (a fast tokenizer: transformers maps the
    ``{% generation %}`` spans to tokens through its offsets)."""
    out = tokenizer.apply_chat_template(
        messages, tools=tools, chat_template=template or chat_template(), tokenize=True,
        return_dict=True, return_assistant_tokens_mask=True,
    )
    mask = out["assistant_masks"]
    return int(sum(mask)), len(out["input_ids"])

#: How an ``llamafactory`` observation joins the results of several calls of one agent turn.
LLAMAFACTORY_RESULT_SEPARATOR = "\n</tool_response>\n<tool_response>\n"


def strip_nulls(value: Any) -> Any:
    """``value`` with every ``None``-valued key of its dicts removed, recursively."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def from_arrow(value: Any) -> Any:
    """``value`` as the export wrote it, from a row ``datasets`` read: :func:`strip_nulls`, and
    the timestamps ``datasets`` 4 makes of ISO-8601 date strings (pyarrow's JSON reader infers
    them: τ² airline's ``"date": "2024-05-21"`` comes back as a ``datetime``, which chat
    templates render as ``"<datetime>"``) written back as text: a date at midnight as
    ``YYYY-MM-DD``, else ``YYYY-MM-DDThh:mm:ss``. ``datasets`` 5 reads the strings as they are.

    >>> import datetime
    >>> from_arrow({"date": datetime.datetime(2024, 5, 21), "at": datetime.datetime(2024, 5, 21, 9, 30), "x": None})
    {'date': '2024-05-21', 'at': '2024-05-21T09:30:00'}
    """
    value = strip_nulls(value)
    if isinstance(value, dict):
        return {k: from_arrow(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_arrow(v) for v in value]
    if isinstance(value, datetime.datetime):
        if value.time() == datetime.time(0) and value.tzinfo is None:
            return value.date().isoformat()
        return value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
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
    JSON strings), ``llamafactory``'s ShareGPT turns as OpenAI-style messages, and the
    timestamps ``datasets`` 4 makes of date strings back as text (:func:`from_arrow`)."""
    row = from_arrow(dict(row))
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
