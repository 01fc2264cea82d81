"""Stubs for the compiled module ppol_rs._core (kept in sync by python/tests/test_stub_sync.py).

Every function returns Python objects (dicts, lists, numpy arrays, classes); none returns JSON
text. Each is a thin adapter over the Rust operations layer (`src/front/ops.rs`), the same
function its CLI verb calls.
"""

import os
import pathlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

_Traces = Union[str, os.PathLike[str], Sequence[Union[str, os.PathLike[str]]], Sequence[Dict[str, Any]]]
_Path = Union[str, os.PathLike[str]]

__version__: str

class Error(Exception): ...
class IoError(Error): ...
class ParseError(Error): ...
class ConfigError(Error): ...
class FeatureSetMismatch(Error): ...
class InsufficientData(Error): ...
class LlmError(Error): ...
class BudgetExhausted(Error): ...
class DomainError(Error): ...
class SandboxError(Error): ...
class RunError(Error): ...
class Cancelled(Error): ...

def load_traces(traces: _Traces, domain: Optional[str] = None) -> List[Dict[str, Any]]: ...
def traces_stats(traces: _Traces, domain: Optional[str] = None) -> List[Dict[str, Any]]: ...
def feature_names() -> List[str]: ...
def fingerprint_matrix(
    traces: _Traces, feature_set: Optional[str] = None, domain: Optional[str] = None
) -> Tuple[npt.NDArray[np.float64], List[str], List[Optional[str]]]: ...
def score(
    human: HumanReference,
    candidates: _Traces,
    discriminator: Discriminator,
    lambda_h: Optional[float] = None,
    lambda_b: Optional[float] = None,
    raw: bool = False,
    clusters: int = 0,
) -> Dict[str, Any]: ...
def audit(
    human: _Traces,
    candidates: List[Tuple[str, _Traces]],
    feature_set: Optional[str] = None,
    folds: int = 5,
    bootstrap: int = 200,
    seed: int = 0,
    llm: Optional[str] = None,
    judge_pairs: int = 20,
    judge_prompt: Optional[_Path] = None,
    human_domain: Optional[str] = None,
) -> Dict[str, Any]: ...
def cli(argv: List[str]) -> int: ...
def shipped(name: str) -> str: ...
def generate(
    program: Optional[_Path] = None,
    task: Optional[str] = None,
    domain: Optional[str] = None,
    split: Optional[str] = None,
    n: Optional[int] = None,
    llm: Optional[str] = None,
    seed: int = 0,
    tau2_data: Optional[_Path] = None,
    timeout_s: Optional[float] = None,
    config: Optional[_Path] = None,
    world: Optional[str] = None,
    task_file: Optional[_Path] = None,
    run: Optional[_Path] = None,
) -> Dict[str, Any]: ...
def episodes(
    domain: Optional[str] = None,
    tasks: str = "all",
    personas: Optional[Union[_Path, List[Dict[str, Any]]]] = None,
    trials: int = 1,
    llm: Optional[str] = None,
    max_turns: Optional[int] = None,
    seed: int = 0,
    tau2_data: Optional[_Path] = None,
    concurrency: int = 256,
    output: Optional[_Path] = None,
    config: Optional[_Path] = None,
    world: Optional[str] = None,
    task_file: Optional[_Path] = None,
    progress: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> Dict[str, Any]: ...
def export_sft(
    episodes: List[_Path],
    all: bool = False,
    tau2_data: Optional[_Path] = None,
    heldout_fraction: float = 0.0,
    seed: int = 0,
    format: str = "ppol",
    output: Optional[_Path] = None,
    heldout_output: Optional[_Path] = None,
    dataset_name: Optional[str] = None,
    format_version: Optional[int] = None,
    system_prompt: Optional[_Path] = None,
    max_tokens: Optional[int] = None,
    bad_calls: str = "cut",
) -> Dict[str, Any]: ...
def evolve_start(
    config: Optional[_Path] = None,
    overrides: Optional[Dict[str, Any]] = None,
    progress: Optional[Callable[[Dict[str, Any]], None]] = None,
    resume_dir: Optional[_Path] = None,
    iterations: Optional[int] = None,
    executor: Optional[str] = None,
    ray_address: Optional[str] = None,
) -> EvolveHandle: ...
def evaluate(
    run_dir: _Path,
    split: Optional[str] = None,
    human: Optional[List[_Path]] = None,
    n: Optional[int] = None,
    executor: Optional[str] = None,
    ray_address: Optional[str] = None,
) -> Dict[str, Any]: ...
def report(run_dir: _Path, out: Optional[_Path] = None) -> pathlib.Path: ...
def config_schema() -> Dict[str, Any]: ...

class EvolveHandle:
    def stop(self) -> None: ...
    def done(self) -> bool: ...
    def wait(self, timeout: Optional[float] = None) -> Optional[Dict[str, Any]]: ...

def persona_block(text: str) -> str: ...

class HumanReference:
    @staticmethod
    def from_traces(
        traces: _Traces, feature_set: Optional[str] = None, domain: Optional[str] = None
    ) -> HumanReference: ...
    @staticmethod
    def load(path: _Path) -> HumanReference: ...
    def save(self, path: _Path) -> None: ...
    @property
    def feature_set(self) -> str: ...
    @property
    def n_dialogues(self) -> int: ...
    @property
    def n_cloud(self) -> int: ...
    @property
    def mean(self) -> npt.NDArray[np.float64]: ...
    @property
    def std(self) -> npt.NDArray[np.float64]: ...
    @property
    def fingerprints(self) -> npt.NDArray[np.float64]: ...
    @property
    def ids(self) -> List[str]: ...
    def to_dict(self) -> Dict[str, Any]: ...

class Discriminator:
    @staticmethod
    def train(
        human: HumanReference,
        baseline: _Traces,
        trees: Optional[int] = None,
        max_depth: Optional[int] = None,
        max_features: Optional[str] = None,
        seed: Optional[int] = None,
        folds: Optional[int] = None,
    ) -> Discriminator: ...
    @staticmethod
    def load(path: _Path) -> Discriminator: ...
    def save(self, path: _Path) -> None: ...
    def p_human(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]: ...
    @property
    def feature_set(self) -> str: ...
    @property
    def grouped_auc(self) -> Optional[float]: ...
    def training(self) -> Dict[str, Any]: ...
def study_make(
    conditions: List[str],
    out: _Path,
    per_condition: int = 20,
    seed: int = 0,
    attention_checks: int = 1,
    agent_turns: str = "dimmed",
    discriminator: Optional[_Path] = None,
    title: Optional[str] = None,
    domain: Optional[str] = None,
) -> Dict[str, Any]: ...
def study_analyze(
    answers: List[_Path],
    key: _Path,
    keep_failed_attention: bool = False,
) -> Dict[str, Any]: ...
