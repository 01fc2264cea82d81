"""Sandbox shim of ``ppol.llm``: completions go through the host's LLM proxy (``ppol_llm``)."""

import ppol_llm

LLMError = ppol_llm.LLMError


def _split_messages(messages):
    system = []
    user = []
    for m in messages or []:
        role = (m.get("role") if isinstance(m, dict) else None) or "user"
        content = m.get("content", "") if isinstance(m, dict) else str(m)
        (system if role in ("system", "developer") else user).append(str(content))
    return ("\n\n".join(system) or None), "\n\n".join(user)


def completion_text(prompt=None, *args, messages=None, system=None, temperature=0.7, max_tokens=800, **_ignored):
    """Text of one completion. ``prompt`` may be a string or a list of chat messages
    (``{"role", "content"}``); ``model`` and other provider options are ignored (the host
    decides the model)."""
    if isinstance(prompt, (list, tuple)) and messages is None:
        messages, prompt = prompt, None
    if messages is not None:
        msg_system, prompt = _split_messages(messages)
        system = system or msg_system
    if prompt is None:
        raise TypeError("completion_text needs a prompt or messages")
    return ppol_llm.complete(str(prompt), system=system, temperature=temperature, max_tokens=max_tokens)


def completion_many(requests, **_ignored):
    """Several completions in parallel (see ``ppol_llm.complete_many``)."""
    return ppol_llm.complete_many(requests)
