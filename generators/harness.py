"""ppol sandbox harness: imports one generator program and reports its personas to the host.

Run by the host as ``python3 -s -S -B harness.py`` inside the run's temporary directory, with
a bidirectional channel on file descriptor 3 (newline-delimited JSON frames). The harness
moves the channel to a high close-on-exec descriptor, points ``sys.stdout`` at stderr so
that the program's prints can never corrupt the protocol, then:

1. reads ``{"type": "init", "program", "task_context", "n", "seed", "llm"}``;
2. imports the program (stage ``import``), checks ``DIVERSITY_AXES`` and
   ``generate_personas_detailed`` (stage ``contract``) and sends
   ``{"type": "axes", "axes": [names]}``;
3. calls ``generate_personas_detailed(task_context, DIVERSITY_AXES, n)`` (stage ``generate``);
4. sends ``{"type": "result", "axes": [...], "rows": [...], "count": k, "truncated": bool}``
   or ``{"type": "error", "stage", "error_type", "message", "traceback"}`` and exits.

LLM requests made through ``ppol_llm`` travel on the same channel (``llm`` / ``llm_result``).
The host validates the rows; the harness only makes them JSON-safe. The program runs in this
process and can write on the channel too, so the host trusts none of the frames: it checks
that the result names exactly the axes declared before generation and validates every row.
"""

import fcntl
import os
import sys

CHANNEL_FD = 3
HIGH_FD = 200
TEXT_KEYS = ("expanded_instruction", "instruction", "text")
ROW_KEYS = ("persona_id", "description", "axis_placement", "reasoning", "source") + TEXT_KEYS


def _json_safe(value, depth=0):
    """Plain JSON values pass; anything else becomes a marker the host reports as a type error."""
    if isinstance(value, str):
        # Lone surrogates cannot be encoded as UTF-8 JSON; replace them instead of failing.
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode("utf-8")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
    if depth > 4:
        return {"__nonjson__": "nested too deep"}
    if isinstance(value, dict):
        return {str(k): _json_safe(v, depth + 1) for k, v in list(value.items())[:256]}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in list(value)[:256]]
    return {"__nonjson__": type(value).__name__}


def _row(item):
    if not isinstance(item, dict):
        try:
            item = dict(item) if hasattr(item, "keys") else None
        except Exception:
            item = None
    if item is None:
        return {"__nonjson__": "row is not a dict"}
    return {k: _json_safe(item[k]) for k in ROW_KEYS if k in item}


def _fail(channel, stage, exc):
    import traceback  # imported lazily: it costs ~10 ms of start-up and is only needed here

    tb = traceback.format_exc(limit=20)
    sys.stderr.write(tb)
    sys.stderr.flush()
    if isinstance(exc, MemoryError):
        stage = "resource"
    message = str(exc)
    if len(message) > 2000:
        message = message[:2000] + "..."
    channel.send(
        {
            "type": "error",
            "stage": stage,
            "error_type": type(exc).__name__,
            "message": message,
            "traceback": tb[-4000:],
        }
    )
    _exit(1)


def _exit(code):
    try:
        sys.stderr.flush()
    finally:
        os._exit(code)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    if not sys.path or sys.path[0] != here:
        sys.path.insert(0, here)

    fd = fcntl.fcntl(CHANNEL_FD, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
    os.close(CHANNEL_FD)

    import ppol_llm

    channel = ppol_llm._Channel(fd)
    init = channel.recv_init()
    ppol_llm._install(channel, init.get("seed", 0), init.get("llm", False))

    # The program's prints go to stderr; stdout stays unused by the protocol.
    sys.stdout = sys.stderr

    program = os.path.join(here, init["program"])
    task_context = init["task_context"]
    n = int(init["n"])
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("generator_program", program)
        module = importlib.util.module_from_spec(spec)
        sys.modules["generator_program"] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from the program is a failure too
        _fail(channel, "import", exc)

    try:
        if not hasattr(module, "DIVERSITY_AXES"):
            raise AttributeError("the program does not define DIVERSITY_AXES")
        axes = module.DIVERSITY_AXES
        if axes is None or not isinstance(axes, (list, tuple)):
            raise TypeError("DIVERSITY_AXES must be a list of dicts, not %s" % type(axes).__name__)
        names = []
        for i, axis in enumerate(axes):
            if not isinstance(axis, dict):
                raise TypeError("DIVERSITY_AXES[%d] is a %s, not a dict" % (i, type(axis).__name__))
            name = axis.get("behavior")
            if not isinstance(name, str) or not name.strip():
                raise ValueError("DIVERSITY_AXES[%d] has no 'behavior' name" % i)
            if name in names:
                raise ValueError("DIVERSITY_AXES names '%s' twice" % name)
            names.append(name)
        func = getattr(module, "generate_personas_detailed", None)
        if not callable(func):
            raise AttributeError("the program does not define generate_personas_detailed(task_context, axes, n)")
    except BaseException as exc:  # noqa: BLE001
        _fail(channel, "contract", exc)

    channel.send({"type": "axes", "axes": names})

    cap = 10 * n + 10
    rows = []
    truncated = False
    count = 0
    try:
        result = func(task_context, axes, n)
        if result is None:
            raise TypeError("generate_personas_detailed returned None")
        if isinstance(result, (str, bytes, dict)):
            raise TypeError("generate_personas_detailed must return an iterable of dicts, not %s" % type(result).__name__)
        for item in result:
            count += 1
            if len(rows) < cap:
                rows.append(_row(item))
            else:
                truncated = True
                break
    except BaseException as exc:  # noqa: BLE001
        _fail(channel, "generate", exc)

    channel.send({"type": "result", "axes": names, "rows": rows, "count": count, "truncated": truncated})
    _exit(0)


if __name__ == "__main__":
    main()
