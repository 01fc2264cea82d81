"""LLM access for ppol generator programs (stdlib only).

Inside the ppol sandbox a generator program has no network and no API keys. It asks the
host for completions through this module; the host answers with its configured model
(role ``generator``), counts the calls and enforces the per-run call cap.

    import ppol_llm
    text = ppol_llm.complete("Write a haiku", system="Be brief", temperature=0.7, max_tokens=800)
    texts = ppol_llm.complete_many([{"prompt": "a"}, {"prompt": "b", "temperature": 0.2}])

Failures (no model attached, call cap reached, provider error) raise ``ppol_llm.LLMError``.
"""

import json
import os
import threading

__all__ = ["LLMError", "complete", "complete_many", "llm_available", "seed"]


class LLMError(RuntimeError):
    """An LLM request could not be answered (no model, call cap reached, provider error)."""


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
        req = dict(zip(("prompt", "system", "temperature", "max_tokens"), req))
    elif not isinstance(req, dict):
        raise TypeError("an LLM request is a prompt string, a dict or a tuple, not %s" % type(req).__name__)
    prompt = req.get("prompt")
    if not isinstance(prompt, str):
        raise TypeError("an LLM request needs a string 'prompt'")
    system = req.get("system")
    if system is not None and not isinstance(system, str):
        raise TypeError("'system' must be a string or None")
    temperature = req.get("temperature", 0.7)
    max_tokens = req.get("max_tokens", 800)
    return {
        "prompt": prompt,
        "system": system,
        "temperature": None if temperature is None else float(temperature),
        "max_tokens": None if max_tokens is None else int(max_tokens),
    }


def complete_many(requests, return_errors=False):
    """Answer several requests; the host runs them in parallel. Returns the texts in order.

    Each request is a prompt string, a dict with ``prompt`` and optional ``system``,
    ``temperature`` (0.7), ``max_tokens`` (800), or a tuple in that order. A failed request
    raises :class:`LLMError` (or, with ``return_errors=True``, is returned as an
    ``LLMError`` instance in its slot).
    """
    reqs = [_normalise(r) for r in requests]
    if not reqs:
        return []
    if _channel is None:
        raise LLMError("no LLM channel: this program is not running inside the ppol sandbox")
    reply = _channel.call({"type": "llm", "requests": reqs})
    results = reply.get("results") or []
    out = []
    for i in range(len(reqs)):
        r = results[i] if i < len(results) else {"error": "missing answer"}
        if "text" in r and r["text"] is not None:
            out.append(r["text"])
        else:
            err = LLMError(str(r.get("error", "unknown LLM error")))
            if not return_errors:
                raise err
            out.append(err)
    return out


def complete(prompt, system=None, temperature=0.7, max_tokens=800):
    """One completion: the assistant's text for ``prompt`` (with an optional system prompt)."""
    return complete_many(
        [{"prompt": prompt, "system": system, "temperature": temperature, "max_tokens": max_tokens}]
    )[0]
