"""Persona injection with ppol's exact text (the compiled ``ppol::persona`` functions).

A persona policy is a short roleplay text. ppol injects it into a user simulator's system
prompt as a block appended after a blank line, and only when the text is non-empty:

>>> from ppol_rs.persona import inject_persona, persona_block
>>> block = persona_block("Type in lowercase.")
>>> block.splitlines()[0]
'## YOUR BEHAVIORAL STYLE FOR THIS CONVERSATION'
>>> inject_persona("You are a customer.\\n", "Type in lowercase.") == "You are a customer.\\n\\n" + block
True
>>> inject_persona("You are a customer.", "   ")
'You are a customer.'
"""

from __future__ import annotations

from ppol_rs import _core

__all__ = ["HEADING", "inject_persona", "persona_block"]

HEADING = "## YOUR BEHAVIORAL STYLE FOR THIS CONVERSATION"
"""The first line of every persona block (what tests look for in recorded prompts)."""


def persona_block(text: str) -> str:
    """The ready-to-inject block for a persona text (``ppol::persona::persona_block``).

    >>> b = persona_block("  Sigh a lot.  ")
    >>> b.startswith(HEADING) and "---\\nSigh a lot.\\n--- \\n" in b
    True
    """
    return _core.persona_block(text)


def inject_persona(system_prompt: str, persona_text: str) -> str:
    """Append the persona block to ``system_prompt`` (``ppol::persona::inject``).

    The prompt is trimmed and the block follows after a blank line. An empty or
    whitespace-only persona leaves the prompt unchanged.

    >>> inject_persona("Base prompt.", "Be terse.").split("\\n\\n")[:2]
    ['Base prompt.', '## YOUR BEHAVIORAL STYLE FOR THIS CONVERSATION']
    >>> inject_persona("Base prompt.  ", "")
    'Base prompt.  '
    """
    if not persona_text.strip():
        return system_prompt
    return f"{system_prompt.strip()}\n\n{persona_block(persona_text)}"
