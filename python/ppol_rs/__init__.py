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

import json
import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Union

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
    "fingerprint",
    "load_traces",
    "score",
]


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
    return json.loads(_core.load_traces_json(_norm(traces), domain))


class Fingerprints(NamedTuple):
    """Fingerprints as a numpy matrix (n × 19) with row ids and column names."""

    values: np.ndarray
    feature_names: List[str]
    ids: List[str]
    task_ids: List[Optional[str]]


def fingerprint(
    traces: Traces,
    feature_set: str = "ppol-0.1.1",
    domain: Optional[str] = None,
    as_frame: Optional[bool] = None,
) -> Any:
    """Behavioural fingerprints (19 features of the user turns) of each dialogue.

    Returns a pandas DataFrame indexed by dialogue id (with a ``task_id`` column) when pandas is
    installed and ``as_frame`` is not False; otherwise a :class:`Fingerprints` tuple.

    >>> import ppol_rs
    >>> fp = ppol_rs.fingerprint([{"id": "a", "conversation": [
    ...     {"role": "user", "content": "CANCEL my SUBSCRIPTION 12345678901"}]}], as_frame=False)
    >>> float(fp.values[0, ppol_rs.FEATURE_NAMES.index("identifiers_per_turn")])
    3.0
    """
    values, ids, task_ids = _core.fingerprint_matrix(_norm(traces), feature_set, domain)
    if as_frame is not False:
        try:
            import pandas as pd
        except ImportError:
            if as_frame:
                raise
        else:
            df = pd.DataFrame(values, columns=FEATURE_NAMES, index=pd.Index(ids, name="id"))
            df.insert(0, "task_id", task_ids)
            return df
    return Fingerprints(values, list(FEATURE_NAMES), list(ids), list(task_ids))


def score(
    human: HumanReference,
    candidates: Traces,
    discriminator: Discriminator,
    lambda_h: float = 0.5,
    lambda_b: float = 0.5,
    raw: bool = False,
    clusters: int = 0,
) -> Dict[str, Any]:
    """Score simulated dialogues against humans, as ``ppol score`` does.

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
    return json.loads(
        _core.score_json(human, _norm(candidates), discriminator, lambda_h, lambda_b, raw, clusters)
    )
