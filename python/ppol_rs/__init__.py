"""ppol_rs — evolve persona policies for LLM user simulators.

The Python face of the `ppol` Rust engine. Function names are the CLI verbs:

>>> import ppol_rs
>>> dialogues = [{"id": "d1", "conversation": [
...     {"role": "user", "content": "hi need to return a lamp"},
...     {"role": "assistant", "content": "Sure, what is the order number?"},
...     {"role": "user", "content": "ok"}]}]
>>> fp = ppol_rs.fingerprint(dialogues, as_frame=False)
>>> fp.values.shape, fp.feature_names[0], float(fp.values[0, 0])
((1, 19), 'words_per_turn', 3.5)

Errors raise subclasses of :class:`ppol_rs.Error` (``ParseError``, ``ConfigError``, ...).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Union

import numpy as np

from ppol_rs import _core
from ppol_rs._core import (
    BudgetExhausted,
    Cancelled,
    ConfigError,
    Discriminator,
    DomainError,
    Error,
    FeatureSetMismatch,
    HumanReference,
    InsufficientData,
    IoError,
    LlmError,
    ParseError,
    RunError,
    SandboxError,
    config_schema,
)

__version__ = _core.__version__

Traces = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]], Sequence[Dict[str, Any]]]

FEATURE_NAMES: List[str] = list(_core.feature_names())
"""The 19 feature names, in column order (D1: 0–7, D2: 8–10, D3: 11–15, D4: 16–18)."""

__all__ = [
    "FEATURE_NAMES",
    "BudgetExhausted",
    "Cancelled",
    "ConfigError",
    "Discriminator",
    "DomainError",
    "Error",
    "FeatureSetMismatch",
    "Fingerprints",
    "HumanReference",
    "InsufficientData",
    "IoError",
    "LlmError",
    "ParseError",
    "RunError",
    "SandboxError",
    "EvolveRun",
    "audit",
    "config_schema",
    "demo_traces",
    "seed_program",
    "episodes",
    "evaluate",
    "evolve",
    "evolve_async",
    "export_sft",
    "fingerprint",
    "generate",
    "load_traces",
    "report",
    "resume",
    "score",
    "study_analyze",
    "study_make",
    "traces_stats",
]


def _pandas(as_frame: Optional[bool]) -> Any:
    """The pandas module when a DataFrame is wanted: ``as_frame=None`` means "if pandas is
    installed", ``True`` requires it (ImportError otherwise), ``False`` never uses it."""
    if as_frame is False:
        return None
    try:
        import pandas
    except ImportError:
        if as_frame:
            raise
        return None
    return pandas


def _norm(traces: Traces) -> Any:
    if isinstance(traces, tuple):
        return list(traces)
    return traces


def load_traces(traces: Traces, domain: Optional[str] = None) -> List[Dict[str, Any]]:
    """Load dialogues from trace files (τ-USI JSON, reference JSON, JSONL or text) or dicts.

    Returns plain dicts ``{"id", "task_id"?, "domain"?, "conversation": [...], "meta"?}``.

    >>> import ppol_rs
    >>> ds = ppol_rs.load_traces([{"id": "x", "task_id": 3,
    ...                            "conversation": [{"role": "user", "content": "hi"}]}])
    >>> ds[0]["task_id"], ds[0]["conversation"][0]["content"]
    ('3', 'hi')
    """
    return _core.load_traces(_norm(traces), domain)


def traces_stats(traces: Traces, domain: Optional[str] = None) -> List[Dict[str, Any]]:
    """Per-domain counts of dialogues, tasks, turns and words (as ``ppol traces stats``).

    >>> import ppol_rs
    >>> s = ppol_rs.traces_stats(ppol_rs.demo_traces("human"))
    >>> s[0]["dialogues"], sorted(s[0])[:3]
    (25, ['assistant_turns', 'dialogues', 'domain'])
    """
    return _core.traces_stats(_norm(traces), domain)


class Fingerprints(NamedTuple):
    """Fingerprints as a numpy matrix (n × 19) with row ids and column names."""

    values: np.ndarray
    feature_names: List[str]
    ids: List[str]
    task_ids: List[Optional[str]]


def fingerprint(
    traces: Traces,
    feature_set: Optional[str] = None,
    domain: Optional[str] = None,
    as_frame: Optional[bool] = None,
) -> Any:
    """Behavioural fingerprints (19 features of the user turns) of each dialogue, with the
    ``ppol-0.1.1`` feature set unless ``feature_set="v2"``.

    Returns a pandas DataFrame indexed by dialogue id (with a ``task_id`` column) when pandas is
    installed and ``as_frame`` is not False; otherwise a :class:`Fingerprints` tuple.

    >>> import ppol_rs
    >>> fp = ppol_rs.fingerprint([{"id": "a", "conversation": [
    ...     {"role": "user", "content": "CANCEL my SUBSCRIPTION 12345678901"}]}], as_frame=False)
    >>> float(fp.values[0, ppol_rs.FEATURE_NAMES.index("identifiers_per_turn")])
    3.0
    """
    values, ids, task_ids = _core.fingerprint_matrix(_norm(traces), feature_set, domain)
    pd = _pandas(as_frame)
    if pd is not None:
        df = pd.DataFrame(values, columns=FEATURE_NAMES, index=pd.Index(ids, name="id"))
        df.insert(0, "task_id", task_ids)
        return df
    return Fingerprints(values, list(FEATURE_NAMES), list(ids), list(task_ids))


def score(
    human: HumanReference,
    candidates: Traces,
    discriminator: Discriminator,
    lambda_h: Optional[float] = None,
    lambda_b: Optional[float] = None,
    raw: bool = False,
    clusters: int = 0,
) -> Dict[str, Any]:
    """Score simulated dialogues against humans, as ``ppol score`` does (λh and λb default to
    the configuration's ``fitness.lambda_h`` / ``fitness.lambda_b``, 0.5 each; ``clusters`` is
    at most 1,000).

    Returns ``{"human_likeness", "coverage", "combined", "dice": {D1..D4, overall}, "counts", ...}``.

    >>> import ppol_rs
    >>> def d(i, task, *turns):
    ...     return {"id": i, "task_id": task, "conversation": [
    ...         {"role": r, "content": c} for r, c in zip(["user", "assistant"] * 9, turns)]}
    >>> humans = [d(f"h{i}", f"t{i % 3}", "hi", "hello", "need refund " * (i % 4 + 1), "ok", "k") for i in range(12)]
    >>> sims = [d(f"s{i}", f"t{i % 3}", "Hello! I would like to request a refund for my order, please.",
    ...           "Sure", "Thank you so much for your help today.") for i in range(12)]
    >>> ref = ppol_rs.HumanReference.from_traces(humans)
    >>> disc = ppol_rs.Discriminator.train(ref, sims, trees=20, folds=3)
    >>> s = ppol_rs.score(ref, sims, disc)
    >>> s["human_likeness"] < 0.5 and 0.0 <= s["coverage"] <= 1.0
    True
    """
    return _core.score(human, _norm(candidates), discriminator, lambda_h, lambda_b, raw, clusters)


def audit(
    human: Traces,
    candidates: Union[Traces, Dict[str, Traces]],
    *,
    feature_set: Optional[str] = None,
    folds: int = 5,
    bootstrap: int = 200,
    seed: int = 0,
    llm: Optional[str] = None,
    judge_pairs: int = 20,
    judge_prompt: Optional[Union[str, "os.PathLike[str]"]] = None,
    human_domain: Optional[str] = None,
    as_frame: Optional[bool] = None,
) -> Any:
    """Audit human-likeness independently of any run's discriminator (as ``ppol audit``):
    fresh classifiers — a random forest and a logistic regression on standardised features —
    trained to tell ``human`` from each condition's dialogues, cross-validated with folds
    grouped by task; the AUC of each with a 95% bootstrap interval (0.5 = indistinguishable,
    1 = always told apart), the features that separate most, and a control row: the humans
    against themselves in two halves by task. A side with fewer than 10 dialogues or 2 task
    groups gives a row marked ``too_few`` (too few humans raise :class:`InsufficientData`).

    ``candidates`` is a dict ``{name: traces}``, or trace files (each one a row named by its
    path). ``llm`` (the ``--llm`` grammar) adds the LLM judge: ``judge_pairs`` pairs of a human
    and a simulated user per condition, which it must tell apart (``judge_prompt``: your own
    prompt file with ``{user_a}`` and ``{user_b}``).

    Returns a DataFrame indexed by condition (the control first) with ``n_human``,
    ``n_candidate``, ``forest_auc``/``_low``/``_high``, ``logistic_auc``/``_low``/``_high``,
    ``judge_accuracy``/``_low``/``_high``, ``top_features`` and ``too_few`` when pandas is
    installed and ``as_frame`` is not False (the whole report in ``df.attrs["report"]``);
    otherwise the report as a dict.

    >>> import ppol_rs
    >>> r = ppol_rs.audit(ppol_rs.demo_traces("human"), {"base": ppol_rs.demo_traces("baseline")},
    ...                   bootstrap=50, as_frame=False)
    >>> r["rows"][0]["random_forest"]["auc"] > 0.9, r["control"]["name"]
    (True, 'control (humans vs humans)')
    """
    if isinstance(candidates, dict):
        pairs = [(str(k), _norm(v)) for k, v in candidates.items()]
    else:
        if isinstance(candidates, (str, os.PathLike)):
            candidates = [candidates]
        pairs = []
        for c in candidates:
            if not isinstance(c, (str, os.PathLike)):
                raise ConfigError(
                    "candidates must be a dict {name: traces} or trace files (paths); "
                    f"found {type(c).__name__} in the list"
                )
            pairs.append((os.fspath(c), os.fspath(c)))
    report = _core.audit(
        _norm(human), pairs, feature_set, folds, bootstrap, seed, llm, judge_pairs,
        None if judge_prompt is None else os.fspath(judge_prompt), human_domain,
    )
    pd = _pandas(as_frame)
    if pd is None:
        return report
    rows = []
    for r in [report["control"], *report["rows"]]:
        flat: Dict[str, Any] = {"name": r["name"], "n_human": r["n_human"], "n_candidate": r["n_candidate"]}
        flat.update(_audit_columns(r, ""))
        rows.append(flat)
    df = pd.DataFrame(rows).set_index("name")
    df.attrs["report"] = report
    return df


SEEDS = ("offline_templates", "two_stage_llm", "direct_prompt")
"""Seed generator programs shipped with ppol (see seeds/README.md)."""


def seed_program(name: str = "offline_templates") -> str:
    """Path of a seed generator program shipped with ppol (written to a cache directory).

    >>> import ppol_rs
    >>> ppol_rs.seed_program("offline_templates").endswith("offline_templates.py")
    True
    """
    if name not in SEEDS:
        raise ConfigError(f"unknown seed program '{name}' (expected one of {', '.join(SEEDS)})")
    import tempfile

    d = os.path.join(tempfile.gettempdir(), f"ppol_rs-{__version__}-seeds")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{name}.py")
    text = _core.shipped(f"seeds/{name}.py")
    current = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            current = f.read()
    if current != text:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


def demo_traces(kind: str = "human") -> List[Dict[str, Any]]:
    """ppol's shipped demo dialogues (invented data): ``human``, ``baseline`` or ``candidates``.

    >>> import ppol_rs
    >>> len(ppol_rs.demo_traces("human")), len(ppol_rs.demo_traces("baseline"))
    (25, 18)
    """
    if kind not in ("human", "baseline", "candidates"):
        raise ConfigError(f"unknown demo traces '{kind}' (expected human, baseline or candidates)")
    return _jsonl_records(_core.shipped(f"demo/{kind}.jsonl"))


def _jsonl_records(jsonl: str) -> List[Dict[str, Any]]:
    """The records of JSON Lines text as dicts, exactly as written (no normalisation)."""
    import json

    return [json.loads(line) for line in jsonl.splitlines() if line.strip()]


def generate(
    program: Optional[Union[str, "os.PathLike[str]"]] = None,
    task: Optional[str] = None,
    *,
    domain: Optional[str] = None,
    split: Optional[str] = None,
    n: Optional[int] = None,
    llm: Optional[str] = None,
    seed: int = 0,
    tau2_data: Optional[Union[str, "os.PathLike[str]"]] = None,
    timeout_s: Optional[float] = None,
    config: Optional[Union[str, "os.PathLike[str]"]] = None,
    world: Optional[str] = None,
    task_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    run: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> List[Dict[str, Any]]:
    """Run a generator program in the sandbox (as ``ppol generate``) and return persona records.

    ``run`` (as ``--run``) is a run directory of :func:`evolve`: its best program
    (``best/program.py``), its configuration (``[sandbox]``, ``[llm]``, ``n``) and its world's
    tasks — every one, unless ``task`` (ids) or ``split`` selects some; ``task_file``,
    ``domain`` or ``world`` choose other tasks. Give ``program`` or ``run``.

    ``task`` is free text, or task ids when ``domain`` (a built-in world), ``world`` (e.g.
    ``"tau2:telecom"``, which lists τ²'s own tasks) or ``task_file`` (JSONL ``{"task_id",
    "context", "split"?}``) is given (or use ``split``). ``llm`` uses
    the ``--llm`` grammar: ``None`` / ``"offline"`` (the program's ``ppol_llm`` calls raise),
    ``"openai:MODEL@URL"``, a TOML LLM config, or ``"scripted[:FILE]"``; ``config`` is a run
    configuration whose ``[sandbox]`` limits and ``[llm]`` apply. ``n`` defaults to
    ``fitness.n_personas`` (10) and is at most 1,000 (:class:`ConfigError` beyond).

    If any task fails, :class:`SandboxError` is raised; it carries ``personas`` (what the other
    tasks produced) and ``failures`` (``[{"task_id", "stage", "reason", "stderr_tail", ...}]``).

    >>> import ppol_rs
    >>> ps = ppol_rs.generate(ppol_rs.seed_program("offline_templates"), domain="demo", task="0", n=3)
    >>> len(ps), sorted(ps[0]) == ["axis_placement", "description", "persona_id", "reasoning", "task_id", "text"]
    (3, True)
    """
    report = _core.generate(
        program, task, domain, split, n, llm, seed, tau2_data, timeout_s, config, world,
        None if task_file is None else os.fspath(task_file),
        None if run is None else os.fspath(run),
    )
    personas: List[Dict[str, Any]] = []
    failures: List[Dict[str, Any]] = []
    for t in report["tasks"]:
        outcome = dict(t["outcome"])
        if outcome.pop("status") == "ok":
            personas.extend(outcome["personas"])
        else:
            failures.append({"task_id": t["task_id"], **outcome})
    if failures:
        first = failures[0]
        err = SandboxError(
            f"{len(failures)} of {len(report['tasks'])} task(s) failed; task {first['task_id']}: "
            f"{first['program']} failed at stage {first['stage']}: {first['reason']}\n{first['stderr_tail']}"
        )
        err.personas = personas  # type: ignore[attr-defined]
        err.failures = failures  # type: ignore[attr-defined]
        raise err
    return personas


def episodes(
    domain: Optional[str] = None,
    tasks: str = "all",
    *,
    personas: Optional[Union[str, "os.PathLike[str]", Sequence[Dict[str, Any]]]] = None,
    trials: int = 1,
    llm: Optional[str] = None,
    max_turns: Optional[int] = None,
    seed: int = 0,
    tau2_data: Optional[Union[str, "os.PathLike[str]"]] = None,
    concurrency: int = 256,
    output: Optional[Union[str, "os.PathLike[str]"]] = None,
    config: Optional[Union[str, "os.PathLike[str]"]] = None,
    world: Optional[str] = None,
    task_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    progress: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> List[Dict[str, Any]]:
    """Play user-simulator ↔ agent ↔ environment episodes (as ``ppol episodes``).

    ``domain`` is a built-in world (``demo``, the default, ``retail``, ``airline``); ``world``
    any other: ``"external:python3 my_sim.py"`` (with ``task_file``), ``"tau2:telecom"``,
    ``"chat"`` (with ``task_file`` and an ``llm``). Give one of ``domain`` and ``world``.

    ``personas`` is a persona JSONL file or a list of persona dicts (from :func:`generate`);
    without personas each task is played by the plain simulator. ``llm=None`` is the ``[llm]``
    of ``config``, else (and ``"offline"``) the offline scripted simulator; otherwise the
    ``--llm`` grammar. ``config`` is a run configuration whose ``[episodes]`` settings
    (``val_max_turns``, the default of ``max_turns``; ``max_tool_rounds``;
    ``user_temperature``), world and ``[llm]`` apply where no argument sets them, as with
    ``ppol episodes --config``. At most
    ``concurrency`` episodes run at once and the LLM budget is checked before each; with
    ``output`` the episodes are written to that JSONL file as they finish (a rerun after an
    interruption plays only what is missing). Failed episodes are in the list with
    ``status == "failed"`` and their ``error``. ``trials`` is 1 to 1,000 and one call plays at
    most 100,000 episodes (tasks × personas × trials); beyond a bound, :class:`ConfigError`.
    ``progress`` is called with a dict after every episode and every few seconds while none
    finishes (``done``, ``total``, ``failed``, ``reused``, ``in_flight``, ``longest_s``,
    ``heartbeat``, and ``line``, the line ``ppol episodes`` prints); an exception it raises
    stops the batch and is raised here. Ctrl-C stops the batch like ``ppol episodes``: no
    episode starts after it, the finished ones stay in ``output + ".partial"`` (the same call
    plays the rest), and ``KeyboardInterrupt`` is raised saying so.

    >>> import ppol_rs
    >>> eps = ppol_rs.episodes("demo", "0,1", trials=2)
    >>> len(eps), eps[0]["termination"], eps[0]["reward"]
    (4, 'user_stop', 1.0)
    """
    if isinstance(personas, tuple):
        personas = list(personas)
    # a persona file is read by ppol (bounded, errors naming file and line), as --personas is
    report = _core.episodes(
        domain,
        tasks,
        personas,
        trials,
        llm,
        max_turns,
        seed,
        tau2_data,
        concurrency,
        output,
        config,
        world,
        None if task_file is None else os.fspath(task_file),
        progress,
    )
    return list(report["episodes"])


def export_sft(
    episodes: Sequence[Union[str, "os.PathLike[str]"]],
    *,
    all: bool = False,
    tau2_data: Optional[Union[str, "os.PathLike[str]"]] = None,
    heldout_fraction: float = 0.0,
    seed: int = 0,
    format: str = "ppol",
    output: Optional[Union[str, "os.PathLike[str]"]] = None,
    heldout_output: Optional[Union[str, "os.PathLike[str]"]] = None,
    dataset_name: Optional[str] = None,
    format_version: Optional[int] = None,
    system_prompt: Optional[Union[str, "os.PathLike[str]"]] = None,
    max_tokens: Optional[int] = None,
    bad_calls: str = "cut",
) -> Dict[str, Any]:
    """Agent-hardening training records from episode files (as ``ppol export sft``):
    ``{"train": [...], "heldout": [...], "heldout_personas", "n_episodes", "clusters",
    "skipped", "bad_call_policy", "bad_calls", "conversions", "dropped_texts", "written",
    "datasets", "notes", "format_version", "tokens", "warnings"}``.

    ``format`` is ``"ppol"`` (messages + tools + metadata), ``"openai"`` (OpenAI chat
    fine-tuning records), ``"hf"`` (TRL ``SFTTrainer`` / transformers chat-template rows:
    ``messages`` with tool-call arguments as dicts, ``tools`` the schema objects) or
    ``"llamafactory"`` (LLaMA-Factory ShareGPT rows: ``conversations`` of human / gpt /
    function_call / observation turns, ``system``, ``tools``). Held-out personas go to
    ``heldout`` in every format. Episodes the format cannot hold (LLaMA-Factory's turn
    alternation) are listed in ``skipped`` with the reason; ``dropped_texts`` counts agent texts
    written beside tool calls that had no place.

    With ``output`` the records are also written (``heldout_output``: where the held-out ones
    go, by default ``output`` with ``.heldout`` before the extension), and for
    ``llamafactory`` registered in the ``dataset_info.json`` next to each file under
    ``dataset_name`` (default: the file's stem; the held-out file as ``NAME.heldout``).
    An ``output`` that is not a regular file (a device, a FIFO) is written in place and nothing
    is made beside it (no default held-out file, no ``dataset_info.json``); ``notes`` says so.

    ``format_version`` picks the layout (default 2; 1 is the layout before it, see the README).
    ``tokens`` holds each training record's estimated token lengths (``rows``: system, tools,
    dialogue), their median and max, and ``suggested_cutoff``; ``warnings`` says what common
    trainer cutoffs would cut, and when an ``openai`` export has fewer than OpenAI's 10
    examples. ``system_prompt`` (a file) replaces the agent's system prompt in every record;
    records estimated longer than ``max_tokens`` are left out and listed in ``skipped``.

    Calls the agent got wrong (arguments that are not a JSON object, a tool it was not
    offered, an argument of a type its schema rules out) are listed in ``bad_calls`` and
    handled as ``bad_calls`` says: ``"cut"`` (the row ends before the agent turn that made the
    first), ``"drop-call"``, ``"drop-episode"`` or ``"keep"`` (as context, ``weight`` 0).
    Argument values are converted to their schema's type, and to one type per argument across
    the file (``conversions`` counts them). Episodes whose turns do not fit together (a tool
    result without its call, a call without its result) are skipped in every format, listed in
    ``skipped`` with ``kind`` ``"malformed"``; an episode id twice among the inputs raises
    ``ParseError`` naming both places.

    >>> import ppol_rs, tempfile, os, json
    >>> out = os.path.join(tempfile.mkdtemp(), "eps.jsonl")
    >>> with open(out, "w") as f:
    ...     f.writelines(json.dumps(e) + chr(10) for e in ppol_rs.episodes("demo", "0,1"))
    >>> r = ppol_rs.export_sft([out])
    >>> len(r["train"]), r["train"][0]["messages"][0]["role"]
    (2, 'system')
    """
    return _core.export_sft(
        [os.fspath(e) for e in episodes],
        all,
        tau2_data,
        heldout_fraction,
        seed,
        format,
        output,
        heldout_output,
        dataset_name,
        format_version,
        None if system_prompt is None else os.fspath(system_prompt),
        max_tokens,
        bad_calls,
    )


class EvolveRun:
    """A running evolution (from :func:`evolve_async`): ``stop()``, ``done()``, ``result()``.

    >>> import ppol_rs, tempfile, os
    >>> out = os.path.join(tempfile.mkdtemp(), "run")
    >>> run = ppol_rs.evolve_async(overrides={"search.iterations": 2, "run.out": out})
    >>> summary = run.result()
    >>> summary["iterations"], summary["reason"]
    (2, 'iterations')
    """

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def stop(self, wait: bool = True, timeout: Optional[float] = None) -> Optional[Dict[str, Any]]:
        """Stop the run: in its baseline at once (the episodes played are kept for
        :func:`resume`), else after the current evaluation. By default wait until it has
        stopped and return its summary, so the run directory is complete when this returns; a
        run stopped in its baseline has no summary and raises :class:`Cancelled` saying what
        was kept. ``wait=False`` only asks (then :meth:`result` waits)."""
        self._handle.stop()
        if not wait:
            return None
        return self.result(timeout)

    def done(self) -> bool:
        """Whether the run has finished."""
        return bool(self._handle.done())

    def result(self, timeout: Optional[float] = None) -> Optional[Dict[str, Any]]:
        """Wait for the run's summary (None if ``timeout`` seconds pass first)."""
        return self._handle.wait(timeout)

    def __await__(self):  # type: ignore[no-untyped-def]
        import asyncio

        return asyncio.get_running_loop().run_in_executor(None, self.result).__await__()


def _world_overrides(
    overrides: Optional[Dict[str, Any]], world: Optional[str], task_file: Any
) -> Optional[Dict[str, Any]]:
    if world is None and task_file is None:
        return overrides
    out = dict(overrides or {})
    for arg, key, value in (
        ("world", "run.world", world),
        ("task_file", "world.task_file", None if task_file is None else os.fspath(task_file)),
    ):
        if value is None:
            continue
        section, name = key.split(".")
        nested = out.get(section)
        given = out.get(key, nested.get(name) if isinstance(nested, dict) else None)
        if given is not None and str(given) != str(value):
            # neither silently wins: the two say different things
            raise ConfigError(
                f"invalid configuration '{key}': {arg}={value!r} and overrides "
                f"{key!r} = {given!r} disagree; give one of them"
            )
        out[key] = value
    return out


def evolve_async(
    config: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    overrides: Optional[Dict[str, Any]] = None,
    progress: Optional[Callable[[Dict[str, Any]], None]] = None,
    world: Optional[str] = None,
    task_file: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> EvolveRun:
    """Start ``ppol evolve`` in the background and return a handle (awaitable in asyncio).

    ``overrides`` sets configuration keys by dotted name, e.g. ``{"search.iterations": 5,
    "run.out": "runs/x", "run.human": ["human.jsonl"]}``. ``world`` is ``[run] world``
    (``"external:python3 my_sim.py"``, ``"tau2:telecom"``, ``"chat"``, or a built-in domain)
    and ``task_file`` ``[world] task_file``. ``progress`` is called with
    ``{"iteration", "iterations", "best_combined", "message"}`` after each step.

    >>> import ppol_rs, tempfile, os
    >>> seen = []
    >>> run = ppol_rs.evolve_async(overrides={"search.iterations": 2, "run.out": os.path.join(tempfile.mkdtemp(), "r")},
    ...                            progress=seen.append)
    >>> run.result()["iterations"], seen[-1]["iteration"]
    (2, 2)
    """
    overrides = _world_overrides(overrides, world, task_file)
    return EvolveRun(_core.evolve_start(config, overrides, progress, None, None))


def evolve(
    config: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    overrides: Optional[Dict[str, Any]] = None,
    progress: Optional[Callable[[Dict[str, Any]], None]] = None,
    world: Optional[str] = None,
    task_file: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Dict[str, Any]:
    """Run ``ppol evolve`` to the end and return its summary (offline with no ``[llm]``).

    ``best_program_id`` is the run's best program: of the programs validated (each new train
    best and each new best of its batch), the one with the highest validation score — the
    program in ``RUN/best/`` that ``eval`` and ``export`` take. ``best_metrics`` are its own
    train metrics, ``best_validation`` its own validation metrics (None when its validation
    failed).

    >>> import ppol_rs, tempfile, os
    >>> s = ppol_rs.evolve(overrides={"search.iterations": 2, "run.out": os.path.join(tempfile.mkdtemp(), "r")})
    >>> s["offline"], s["best_program_id"] is not None
    (True, True)
    """
    run = evolve_async(config, overrides=overrides, progress=progress, world=world, task_file=task_file)
    try:
        return run.result()  # type: ignore[return-value]
    except KeyboardInterrupt:
        run.stop()
        return run.result()  # type: ignore[return-value]


def resume(
    run_dir: Union[str, "os.PathLike[str]"],
    *,
    iterations: Optional[int] = None,
    progress: Optional[Callable[[Dict[str, Any]], None]] = None,
    executor: Optional[str] = None,
    ray_address: Optional[str] = None,
) -> Dict[str, Any]:
    """Continue a run from its last checkpoint (as ``ppol resume``); returns its summary.
    ``executor`` (``"local"``, ``"ray"``) and ``ray_address`` play its simulators elsewhere
    this time, over the run's ``[world]`` (a run whose Ray cluster is gone goes on here).

    >>> import ppol_rs, tempfile, os
    >>> out = os.path.join(tempfile.mkdtemp(), "r")
    >>> _ = ppol_rs.evolve(overrides={"search.iterations": 2, "run.out": out})
    >>> ppol_rs.resume(out, iterations=3)["iterations"]
    3
    """
    return EvolveRun(
        _core.evolve_start(None, None, progress, run_dir, iterations, executor, ray_address)
    ).result()  # type: ignore[return-value]


def evaluate(
    run_dir: Union[str, "os.PathLike[str]"],
    *,
    split: Optional[str] = None,
    human: Optional[Sequence[Union[str, "os.PathLike[str]"]]] = None,
    n: Optional[int] = None,
    as_frame: Optional[bool] = None,
    executor: Optional[str] = None,
    ray_address: Optional[str] = None,
) -> Any:
    """The paper's Table 1 for a run (as ``ppol eval``): a DataFrame of rows human, base,
    direct, seed, evolved and ``evolved - seed`` when pandas is installed, else the JSON table
    as a dict. ``executor`` (``"local"``, ``"ray"``) and ``ray_address`` play the simulators
    elsewhere this time, over the run's ``[world]``.

    A row that could not be computed (``direct`` offline, a program whose generation failed)
    holds NaN in every number, with the reason in ``skipped``; ``success_rate`` is NaN (None in
    the dict) where the world, or the humans' traces, give no reward. The ``evolved - seed`` row
    holds each column's difference and, in ``standard_error``, the standard error of the Score's
    per-task differences; ``note`` says when it cannot be told from noise, and ``skipped`` why it
    is not shown (evolved is the seed program, a row was skipped). The dict has the same under
    ``"evolved_vs_seed"``.
    Next to HL (the run's own discriminator) each row has its independent audit against the
    held-out humans (see :func:`audit`): ``audit_forest_auc``/``_low``/``_high``,
    ``audit_logistic_auc``/``_low``/``_high``, ``judge_accuracy``/``_low``/``_high`` and
    ``audit_too_few``; how the audit was made is in ``df.attrs["audit"]``.

    >>> import ppol_rs, tempfile, os
    >>> out = os.path.join(tempfile.mkdtemp(), "r")
    >>> _ = ppol_rs.evolve(overrides={"search.iterations": 2, "run.out": out})
    >>> t = ppol_rs.evaluate(out, n=3, as_frame=False)
    >>> [r["name"] for r in t["rows"]], t["rows"][2]["score"]
    (['human', 'base', 'direct', 'seed', 'evolved'], nan)
    """
    table = _core.evaluate(
        run_dir, split, None if human is None else [os.fspath(h) for h in human], n, executor, ray_address
    )
    nan = float("nan")
    for r in table["rows"]:
        if r.get("skipped"):
            # not 0.0: a row that was not computed must not pull a mean or a plot down
            r.update(human_likeness=nan, coverage=nan, score=nan, n_dialogues=nan)
            r["dice"] = {k: nan for k in r["dice"]}
    pd = _pandas(as_frame)
    if pd is not None:
        rows = []
        for r in table["rows"]:
            flat = {k: v for k, v in r.items() if k not in ("dice", "audit")}
            flat.update({f"dice_{k}": v for k, v in r["dice"].items()})
            flat.update(_audit_columns(r.get("audit"), "audit_"))
            rows.append(flat)
        c = table["evolved_vs_seed"]
        diff: Dict[str, Any] = {
            "name": "evolved - seed",
            "human_likeness": c["human_likeness"],
            "coverage": c["coverage"],
            "score": c["score"],
            "standard_error": c["standard_error"],
            "skipped": ("evolved is the seed program: " + c["evolved_is_seed"]
                        if c["evolved_is_seed"] else c["not_shown"]),
            "note": c["noise"],
        }
        diff.update({f"dice_{k}": v for k, v in (c["dice"] or {}).items()})
        rows.append(diff)
        frame = pd.DataFrame(rows).set_index("name")
        numeric = [k for k in frame.columns if k.startswith("dice_")]
        numeric += ["human_likeness", "coverage", "score", "success_rate", "standard_error"]
        frame[numeric] = frame[numeric].astype(float)
        frame.attrs["audit"] = table.get("audit")
        return frame
    return table


def _audit_columns(a: Optional[Dict[str, Any]], prefix: str) -> Dict[str, Any]:
    """An audit row's numbers as flat columns: each classifier's AUC with its interval, the
    judge's accuracy with its interval, the separating features and why there is no AUC."""
    a = a or {}
    out: Dict[str, Any] = {}
    for key, col in (("random_forest", "forest"), ("logistic", "logistic")):
        i = a.get(key) or {}
        out.update({f"{prefix}{col}_auc": i.get("auc"), f"{prefix}{col}_low": i.get("low"), f"{prefix}{col}_high": i.get("high")})
    acc = (a.get("judge") or {}).get("accuracy") or {}
    out.update({"judge_accuracy": acc.get("share"), "judge_low": acc.get("low"), "judge_high": acc.get("high")})
    out[f"{prefix}top_features"] = ", ".join(f["feature"] for f in a.get("top_features", []))
    out[f"{prefix}too_few"] = a.get("too_few")
    return out


def report(run_dir: Union[str, "os.PathLike[str]"], out: Optional[Union[str, "os.PathLike[str]"]] = None) -> str:
    """Write the run's self-contained HTML report (as ``ppol report``); returns its path.

    >>> import ppol_rs, tempfile, os
    >>> out = os.path.join(tempfile.mkdtemp(), "r")
    >>> _ = ppol_rs.evolve(overrides={"search.iterations": 1, "run.out": out})
    >>> ppol_rs.report(out).endswith("report.html")
    True
    """
    return str(_core.report(run_dir, out))


def study_make(
    conditions: Dict[str, Union[Union[str, "os.PathLike[str]"], Sequence[Union[str, "os.PathLike[str]"]]]],
    out: Union[str, "os.PathLike[str]"],
    *,
    per_condition: int = 20,
    seed: int = 0,
    attention_checks: int = 1,
    agent_turns: str = "dimmed",
    discriminator: Optional[Union[str, "os.PathLike[str]"]] = None,
    title: Optional[str] = None,
    domain: Optional[str] = None,
) -> Dict[str, Any]:
    """A blinded human-judgement study (as ``ppol study make``): ``conditions`` maps a name
    (``"human"``, ``"base"``, ``"evolved"``, ...) to one or more trace or episode files
    (``hf://`` paths too). Writes ``study.html`` (for annotators), ``label_studio_tasks.json`` +
    ``label_studio_config.xml`` and ``key.json`` (keep it to yourself) into ``out`` and returns
    their paths with ``n_items`` and ``study_id``. ``domain`` keeps only dialogues of one domain
    (τ-USI files mix airline and retail).

    >>> import ppol_rs, tempfile, os, json
    >>> d = tempfile.mkdtemp()
    >>> for kind in ("human", "baseline"):
    ...     with open(os.path.join(d, kind + ".jsonl"), "w") as f:
    ...         f.writelines(json.dumps(r) + chr(10) for r in ppol_rs.demo_traces(kind))
    >>> files = ppol_rs.study_make({"human": os.path.join(d, "human.jsonl"),
    ...                             "base": os.path.join(d, "baseline.jsonl")},
    ...                            os.path.join(d, "study"), per_condition=5)
    >>> files["n_items"], os.path.basename(files["page"])
    (11, 'study.html')
    """
    specs: List[str] = []
    for name, files in conditions.items():
        if isinstance(files, (str, os.PathLike)):
            files = [files]
        specs.extend(f"{name}={os.fspath(f)}" for f in files)
    return _core.study_make(
        specs, os.fspath(out), per_condition, seed, attention_checks, agent_turns,
        None if discriminator is None else os.fspath(discriminator), title, domain,
    )


def study_analyze(
    answers: Sequence[Union[str, "os.PathLike[str]"]],
    key: Union[str, "os.PathLike[str]"],
    *,
    keep_failed_attention: bool = False,
) -> Dict[str, Any]:
    """Un-blind a study (as ``ppol study analyze``): ``answers`` are files downloaded from the
    page or Label Studio JSON exports, ``key`` the study's ``key.json``. Returns per condition
    the share judged human with its 95% Wilson interval, Welch's t between every pair,
    Krippendorff's alpha and the point-biserial r of "judged human" with P(human);
    annotators who failed an attention check are listed and, unless
    ``keep_failed_attention``, excluded.

    >>> import ppol_rs, tempfile, os, json
    >>> d = tempfile.mkdtemp()
    >>> for kind in ("human", "baseline"):
    ...     with open(os.path.join(d, kind + ".jsonl"), "w") as f:
    ...         f.writelines(json.dumps(r) + chr(10) for r in ppol_rs.demo_traces(kind))
    >>> files = ppol_rs.study_make({"human": os.path.join(d, "human.jsonl"),
    ...                             "base": os.path.join(d, "baseline.jsonl")},
    ...                            os.path.join(d, "study"), per_condition=5)
    >>> with open(files["key"]) as f:
    ...     items = [i["item"] for i in json.load(f)["items"]]
    >>> answers = {"annotator": "a1", "answers": [{"item": i, "judgement": "bot"} for i in items]}
    >>> with open(os.path.join(d, "a1.json"), "w") as f:
    ...     json.dump(answers, f)
    >>> r = ppol_rs.study_analyze([os.path.join(d, "a1.json")], files["key"])
    >>> [(c["condition"], c["n"], c["judged_human"]["share"]) for c in r["conditions"]]
    [('human', 5, 0.0), ('base', 5, 0.0)]
    """
    return _core.study_analyze([os.fspath(a) for a in answers], os.fspath(key), keep_failed_attention)
