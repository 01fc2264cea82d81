"""LLM access for ppol generator programs (stdlib only).

Inside the ppol sandbox a generator program has no network and no API keys. It asks the
host for completions through this module; the host answers with its configured model
(role ``generator``), counts the calls and enforces the per-run call cap.

    import ppol_llm
    text = ppol_llm.complete("Write a haiku", system="Be brief", temperature=0.7, max_tokens=800)
    texts = ppol_llm.complete_many([{"prompt": "a"}, {"prompt": "b", "temperature": 0.2}])

Answers as JSON: a request may carry a JSON ``schema`` (an object schema) for its answer. The
host asks the model's endpoint to constrain the answer to it (constrained decoding: OpenAI's
``json_schema``, llama-cpp-python's ``json_object`` with a schema, or nothing where the
endpoint takes neither) and says which it did:

    ans = ppol_llm.complete_json("List 3 colours", {"type": "object", "properties": {...}})
    ans.value        # the answer parsed as JSON, or None when it is not JSON
    ans.text         # the raw answer
    ans.constrained  # True when the endpoint constrained the answer to the schema
    ans.mode         # "json_schema", "json_object" or "unconstrained"

``complete_many_json`` does the same for several requests (each with its ``schema``), and
``complete`` / ``complete_many`` accept ``schema`` too but return the text only. A constrained
answer can still be cut short by ``max_tokens``: check ``value`` before trusting it.

Failures (no model attached, call cap reached, provider error) raise ``ppol_llm.LLMError``.
"""

import json
import os
import threading

__all__ = [
    "JsonAnswer",
    "LLMError",
    "complete",
    "complete_json",
    "complete_many",
    "complete_many_json",
    "llm_available",
    "seed",
]

MODES = ("json_schema", "json_object", "unconstrained")


class LLMError(RuntimeError):
    """An LLM request could not be answered (no model, call cap reached, provider error)."""


class JsonAnswer(tuple):
    """The answer to a request with a ``schema``: ``(value, text, constrained, mode)``.

    ``value`` is the answer parsed as JSON (``None`` when the text is not JSON), ``text`` the
    raw answer, ``mode`` how the endpoint was asked to constrain it (``"json_schema"``,
    ``"json_object"``, or ``"unconstrained"`` when it takes no schema) and ``constrained``
    whether it was (``mode != "unconstrained"``).
    """

    __slots__ = ()

    def __new__(cls, value, text, mode):
        return tuple.__new__(cls, (value, text, mode != "unconstrained", mode))

    value = property(lambda self: self[0])
    text = property(lambda self: self[1])
    constrained = property(lambda self: self[2])
    mode = property(lambda self: self[3])

    def __repr__(self):
        return "JsonAnswer(value=%r, constrained=%r, mode=%r)" % (self.value, self.constrained, self.mode)


def _parse_json(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


class _Channel:
    """Newline-delimited JSON frames over one bidirectional file descriptor.

    Any number of threads may call :meth:`call`; the thread that holds the read lock reads
    one frame and files it under its id, waking whoever waits for it.
    """

    def __init__(self, fd):
        self._fd = fd
        self._reader = os.fdopen(os.dup(fd), "rb", buffering=1 << 16)
        self._wlock = threading.Lock()
        self._rlock = threading.Lock()
        self._cond = threading.Condition()
        self._inbox = {}
        self._next_id = 0
        self._closed = False

    def send(self, frame):
        data = (json.dumps(frame, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
        with self._wlock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]

    def _read_one(self):
        line = self._reader.readline()
        if not line:
            self._closed = True
            return None
        return json.loads(line)

    def recv_init(self):
        frame = self._read_one()
        if frame is None or frame.get("type") != "init":
            raise RuntimeError("ppol harness: expected an init frame from the host")
        return frame

    def call(self, frame):
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        frame = dict(frame)
        frame["id"] = rid
        self.send(frame)
        while True:
            with self._cond:
                if rid in self._inbox:
                    return self._inbox.pop(rid)
                if self._closed:
                    raise LLMError("the host closed the LLM channel")
            if self._rlock.acquire(timeout=0.05):
                try:
                    with self._cond:
                        if rid in self._inbox:
                            return self._inbox.pop(rid)
                    reply = self._read_one()
                    with self._cond:
                        if reply is not None:
                            self._inbox[reply.get("id")] = reply
                        self._cond.notify_all()
                finally:
                    self._rlock.release()
            else:
                with self._cond:
                    if rid not in self._inbox and not self._closed:
                        self._cond.wait(timeout=0.05)


_channel = None
_seed = 0
_llm = False


def _install(channel, seed_value, llm_attached):
    """Called by the harness before the program is imported."""
    global _channel, _seed, _llm
    _channel = channel
    _seed = int(seed_value)
    _llm = bool(llm_attached)


def seed():
    """The run's seed (also in the environment as ``PPOL_SEED``)."""
    return _seed


def llm_available():
    """Whether the host attached a model (``--llm none`` means every request raises)."""
    return _channel is not None and _llm


def _normalise(req):
    if isinstance(req, str):
        req = {"prompt": req}
    elif isinstance(req, (list, tuple)):
        req = dict(zip(("prompt", "system", "temperature", "max_tokens", "schema"), req))
    elif not isinstance(req, dict):
        raise TypeError("an LLM request is a prompt string, a dict or a tuple, not %s" % type(req).__name__)
    prompt = req.get("prompt")
    if not isinstance(prompt, str):
        raise TypeError("an LLM request needs a string 'prompt'")
    system = req.get("system")
    if system is not None and not isinstance(system, str):
        raise TypeError("'system' must be a string or None")
    schema = req.get("schema")
    if schema is not None and not isinstance(schema, dict):
        raise TypeError("'schema' must be a JSON schema (a dict) or None")
    temperature = req.get("temperature", 0.7)
    max_tokens = req.get("max_tokens", 800)
    out = {
        "prompt": prompt,
        "system": system,
        "temperature": None if temperature is None else float(temperature),
        "max_tokens": None if max_tokens is None else int(max_tokens),
    }
    if schema is not None:
        out["schema"] = schema
    return out


def _answer(requests):
    """The host's result objects for ``requests`` (normalised), in order."""
    reqs = [_normalise(r) for r in requests]
    if not reqs:
        return reqs, []
    if _channel is None:
        raise LLMError("no LLM channel: this program is not running inside the ppol sandbox")
    reply = _channel.call({"type": "llm", "requests": reqs})
    results = reply.get("results") or []
    return reqs, [results[i] if i < len(results) else {"error": "missing answer"} for i in range(len(reqs))]


def _failed(r):
    return not ("text" in r and r["text"] is not None)


def complete_many(requests, return_errors=False):
    """Answer several requests; the host runs them in parallel. Returns the texts in order.

    Each request is a prompt string, a dict with ``prompt`` and optional ``system``,
    ``temperature`` (0.7), ``max_tokens`` (800) and ``schema`` (a JSON schema the answer is
    constrained to where the endpoint can; see :func:`complete_many_json`), or a tuple in that
    order. A failed request raises :class:`LLMError` (or, with ``return_errors=True``, is
    returned as an ``LLMError`` instance in its slot).
    """
    _, results = _answer(requests)
    out = []
    for r in results:
        if not _failed(r):
            out.append(r["text"])
        else:
            err = LLMError(str(r.get("error", "unknown LLM error")))
            if not return_errors:
                raise err
            out.append(err)
    return out


def complete_many_json(requests, return_errors=False):
    """Like :func:`complete_many` for requests with a ``schema``: returns a
    :class:`JsonAnswer` per request (value, text, constrained, mode), in order."""
    reqs, results = _answer(requests)
    out = []
    for req, r in zip(reqs, results):
        if _failed(r):
            err = LLMError(str(r.get("error", "unknown LLM error")))
            if not return_errors:
                raise err
            out.append(err)
            continue
        mode = r.get("schema_mode")
        if mode not in MODES:
            mode = "unconstrained"
        out.append(JsonAnswer(_parse_json(r["text"]), r["text"], mode))
    return out


def complete(prompt, system=None, temperature=0.7, max_tokens=800, schema=None):
    """One completion: the assistant's text for ``prompt`` (with an optional system prompt and
    an optional JSON ``schema`` the answer is constrained to where the endpoint can)."""
    return complete_many(
        [{"prompt": prompt, "system": system, "temperature": temperature, "max_tokens": max_tokens,
          "schema": schema}]
    )[0]


def complete_json(prompt, schema, system=None, temperature=0.7, max_tokens=800):
    """One completion constrained to the JSON ``schema`` where the endpoint can: a
    :class:`JsonAnswer` (``value`` parsed or None, ``text``, ``constrained``, ``mode``)."""
    if not isinstance(schema, dict):
        raise TypeError("'schema' must be a JSON schema (a dict)")
    return complete_many_json(
        [{"prompt": prompt, "system": system, "temperature": temperature, "max_tokens": max_tokens,
          "schema": schema}]
    )[0]
