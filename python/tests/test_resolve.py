"""The CLI and Python resolve a verb's request in one place (issue #38): the same request given
as `ppol VERB --flags` (run through `python -m ppol_rs`, the binary's command line in this
extension) and as `ppol_rs.VERB(kwargs)` resolves to the same request — defaults, world,
tasks and split, configuration layers, LLM. The extension's test support writes the resolved
request to `$PPOL_RESOLVED_TO` and stops before any work (built with the cargo feature
`testing`, as `.ci/test` builds it)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

import ppol_rs

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAM = str(ROOT / "seeds" / "offline_templates.py")


@pytest.fixture
def tasks_file(tmp_path):
    """Tasks without a split (split by the seed, as a run splits them) and two with one."""
    f = tmp_path / "tasks.jsonl"
    lines = [{"task_id": f"t{i}", "context": f"return item {i} from order #{100 + i}"} for i in range(12)]
    lines += [{"task_id": "fixed-test", "context": "cancel a booking", "split": "test"},
              {"task_id": "fixed-train", "context": "change a seat", "split": "train"}]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f


@pytest.fixture
def run_toml(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text("[sandbox]\nmax_llm_calls = 7\n\n[episodes]\nval_max_turns = 9\n\n[fitness]\nn_personas = 4\n")
    return f


def via_cli(tmp_path, args):
    out = tmp_path / "cli.json"
    env = dict(os.environ, PPOL_RESOLVED_TO=str(out))
    proc = subprocess.run([sys.executable, "-m", "ppol_rs", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert out.exists(), f"the CLI did not resolve (exit {proc.returncode}): {proc.stderr}"
    assert "resolved only" in proc.stderr, proc.stderr
    return json.loads(out.read_text())


def via_python(tmp_path, monkeypatch, fn, **kwargs):
    out = tmp_path / "py.json"
    monkeypatch.setenv("PPOL_RESOLVED_TO", str(out))
    with pytest.raises(ppol_rs.ConfigError, match="resolved only"):
        fn(**kwargs)
    monkeypatch.delenv("PPOL_RESOLVED_TO")
    return json.loads(out.read_text())


GENERATE = [
    ("task file, test split", ["--task-file", "{tasks}", "--split", "test", "-n", "2", "--seed", "3"],
     dict(task_file="{tasks}", split="test", n=2, seed=3)),
    ("task file, ids", ["--task-file", "{tasks}", "--task", "t1,t4"], dict(task_file="{tasks}", task="t1,t4")),
    ("demo ids", ["--domain", "demo", "--task", "0,1"], dict(domain="demo", task="0,1")),
    ("demo split", ["--world", "demo", "--split", "train", "--seed", "9"], dict(world="demo", split="train", seed=9)),
    ("free text", ["--task", "a refund for a broken kettle"], dict(task="a refund for a broken kettle")),
    ("config and a sandbox flag", ["--task", "x", "--config", "{run}", "--timeout", "5"],
     dict(task="x", config="{run}", timeout_s=5.0)),
    ("llm", ["--task", "x", "--llm", "scripted"], dict(task="x", llm="scripted")),
]


def fill(value, tasks, run):
    if isinstance(value, str):
        return value.replace("{tasks}", str(tasks)).replace("{run}", str(run))
    return value


@pytest.mark.parametrize("name,flags,kwargs", GENERATE, ids=[g[0] for g in GENERATE])
def test_generate_resolves_the_same_through_both_front_ends(tmp_path, monkeypatch, tasks_file, run_toml,
                                                             name, flags, kwargs):
    cli = via_cli(tmp_path, ["generate", "--program", PROGRAM] + [fill(f, tasks_file, run_toml) for f in flags])
    py = via_python(tmp_path, monkeypatch, ppol_rs.generate, program=PROGRAM,
                    **{k: fill(v, tasks_file, run_toml) for k, v in kwargs.items()})
    assert cli == py
    assert cli["verb"] == "generate" and cli["request"]["tasks"], cli


EPISODES = [
    ("defaults", ["--domain", "demo"], dict(domain="demo")),
    ("split, trials, seed", ["--domain", "demo", "--tasks", "train", "--trials", "2", "--seed", "5"],
     dict(domain="demo", tasks="train", trials=2, seed=5)),
    ("world and task file", ["--world", "external:python3 sim.py", "--task-file", "{tasks}"],
     dict(world="external:python3 sim.py", task_file="{tasks}")),
    ("config", ["--domain", "demo", "--config", "{run}", "--max-turns", "6"],
     dict(domain="demo", config="{run}", max_turns=6)),
    ("config's turns", ["--domain", "demo", "--config", "{run}"], dict(domain="demo", config="{run}")),
    ("llm and concurrency", ["--domain", "demo", "--llm", "scripted", "--concurrency", "3"],
     dict(domain="demo", llm="scripted", concurrency=3)),
]


@pytest.mark.parametrize("name,flags,kwargs", EPISODES, ids=[e[0] for e in EPISODES])
def test_episodes_resolves_the_same_through_both_front_ends(tmp_path, monkeypatch, tasks_file, run_toml,
                                                             name, flags, kwargs):
    out = str(tmp_path / "eps.jsonl")
    cli = via_cli(tmp_path, ["episodes", "-o", out] + [fill(f, tasks_file, run_toml) for f in flags])
    py = via_python(tmp_path, monkeypatch, ppol_rs.episodes, output=out,
                    **{k: fill(v, tasks_file, run_toml) for k, v in kwargs.items()})
    assert cli == py
    assert cli["verb"] == "episodes"


def test_the_configuration_reaches_both_front_ends(tmp_path, monkeypatch, run_toml):
    """What the file sets arrives resolved: the request is not just equal, it is right."""
    got = via_python(tmp_path, monkeypatch, ppol_rs.episodes, domain="demo", config=str(run_toml))
    assert got["request"]["max_turns"] == 9
    got = via_python(tmp_path, monkeypatch, ppol_rs.generate, program=PROGRAM, task="x", config=str(run_toml))
    assert got["request"]["n"] == 4 and got["request"]["sandbox"]["max_llm_calls"] == 7


def test_generate_task_file_and_split_give_the_same_personas(tmp_path, tasks_file):
    """`ppol generate --task-file F --split test` and `generate(task_file=F, split="test")`:
    the same tasks (the seeded split of the unsplit ones) and the same personas."""
    out = tmp_path / "personas.jsonl"
    proc = subprocess.run([sys.executable, "-m", "ppol_rs", "generate", "--program", PROGRAM,
                           "--task-file", str(tasks_file), "--split", "test", "-n", "3", "--seed", "4",
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cli = [json.loads(line) for line in out.read_text().splitlines()]
    py = ppol_rs.generate(PROGRAM, task_file=tasks_file, split="test", n=3, seed=4)
    assert cli == py
    task_ids = {p["task_id"] for p in py}
    assert "fixed-test" in task_ids and "fixed-train" not in task_ids, task_ids
    assert len(task_ids) >= 2, task_ids


EVOLVE = [
    ("defaults", [], {}),
    ("iterations, seed, domain", ["--iterations", "3", "--seed", "2", "--domain", "demo"],
     {"search.iterations": 3, "search.seed": 2, "run.domain": "demo"}),
    ("config and a flag over it", ["--config", "{run}", "--iterations", "4"], {"search.iterations": 4}),
    ("world and task file", ["--world", "external:python3 sim.py", "--task-file", "{tasks}"],
     {"run.world": "external:python3 sim.py", "world.task_file": "{tasks}"}),
]


@pytest.mark.parametrize("name,flags,overrides", EVOLVE, ids=[e[0] for e in EVOLVE])
def test_evolve_resolves_the_same_configuration_through_both_front_ends(tmp_path, monkeypatch, tasks_file,
                                                                       run_toml, name, flags, overrides):
    out = str(tmp_path / "run")
    config = str(run_toml) if "--config" in flags else None
    cli = via_cli(tmp_path, ["evolve", "--out", out, "--quiet"] + [fill(f, tasks_file, run_toml) for f in flags])
    py = via_python(tmp_path, monkeypatch, ppol_rs.evolve_async, config=config,
                    overrides={"run.out": out, **{k: fill(v, tasks_file, run_toml) for k, v in overrides.items()}})
    assert cli == py
    assert cli["verb"] == "evolve" and cli["request"]["run"]["out"] == out
    assert not (tmp_path / "run").exists(), "resolving created the run directory"


DEMO = ROOT / "fitness" / "demo"


@pytest.fixture
def episodes_file(tmp_path):
    f = tmp_path / "eps.jsonl"
    ppol_rs.episodes(domain="demo", tasks="0", output=str(f))
    return f


def test_export_audit_study_and_eval_resolve_the_same_through_both_front_ends(tmp_path, monkeypatch, episodes_file):
    human, base = str(DEMO / "human.jsonl"), str(DEMO / "baseline.jsonl")
    out = str(tmp_path / "train.jsonl")
    cases = [
        (["export", "sft", str(episodes_file), "-o", out, "--format", "hf", "--heldout-fraction", "0.2", "--seed", "3"],
         ppol_rs.export_sft, dict(episodes=[str(episodes_file)], output=out, format="hf", heldout_fraction=0.2, seed=3)),
        (["export", "sft", str(episodes_file), "-o", out], ppol_rs.export_sft, dict(episodes=[str(episodes_file)], output=out)),
        (["audit", "--human", human, base, "--folds", "3", "--seed", "4"],
         ppol_rs.audit, dict(human=human, candidates=[base], folds=3, seed=4)),
        (["audit", "--human", human, base], ppol_rs.audit, dict(human=human, candidates=[base])),
        (["study", "make", "--condition", f"human={human}", "--condition", f"base={base}", "-o", str(tmp_path / "s")],
         ppol_rs.study_make, dict(conditions={"human": human, "base": base}, out=str(tmp_path / "s"))),
        (["eval", str(tmp_path / "run"), "--split", "train", "--human", human],
         ppol_rs.evaluate, dict(run_dir=str(tmp_path / "run"), split="train", human=[human])),
    ]
    for flags, fn, kwargs in cases:
        cli = via_cli(tmp_path, flags)
        py = via_python(tmp_path, monkeypatch, fn, **kwargs)
        assert cli == py, flags
        assert cli["verb"] in " ".join(flags[:2]), cli
    assert not (tmp_path / "s").exists() and not pathlib.Path(out).exists()


def test_discriminator_train_and_score_resolve_the_same_through_both_front_ends(tmp_path, monkeypatch):
    human, base, cands = (str(DEMO / f) for f in ("human.jsonl", "baseline.jsonl", "candidates.jsonl"))
    ref = ppol_rs.HumanReference.from_traces(human)
    cli = via_cli(tmp_path, ["discriminator", "train", "--human", human, "--baseline", base, "-o",
                             str(tmp_path / "d.json"), "--trees", "50", "--seed", "3", "--max-depth", "0"])
    py = via_python(tmp_path, monkeypatch, ppol_rs.Discriminator.train, human=ref, baseline=base,
                    trees=50, seed=3, max_depth=0)
    assert cli == py and "n_trees: 50" in cli["request"]["forest"], cli
    cli = via_cli(tmp_path, ["discriminator", "train", "--human", human, "--baseline", base, "-o", str(tmp_path / "d.json")])
    py = via_python(tmp_path, monkeypatch, ppol_rs.Discriminator.train, human=ref, baseline=base)
    assert cli == py
    disc = ppol_rs.Discriminator.train(ref, base, trees=20)
    disc.save(str(tmp_path / "d.json"))
    for flags, kwargs in [([], {}), (["--lambda-h", "0.7", "--clusters", "3", "--raw"], dict(lambda_h=0.7, clusters=3, raw=True))]:
        cli = via_cli(tmp_path, ["score", "--human", human, "--discriminator", str(tmp_path / "d.json"), cands] + flags)
        py = via_python(tmp_path, monkeypatch, ppol_rs.score, human=ref, candidates=cands, discriminator=disc, **kwargs)
        assert cli == py, flags


def test_verbs_without_settings_give_the_same_output_through_both_front_ends(tmp_path):
    """`traces stats`, `reference` and `study analyze` take files and a flag or two, nothing to
    resolve: both front ends call the same operation, so their outputs are compared instead
    (`fingerprint`'s are in test_core.py)."""
    fixtures = ROOT / "tests" / "fixtures"
    traces = [str(fixtures / "traces" / "dialogues.jsonl"), str(fixtures / "traces" / "tau_usi_small.json")]

    def cli(*args):
        proc = subprocess.run([sys.executable, "-m", "ppol_rs", *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    for domain in (None, "airline"):
        flags = ["--domain", domain] if domain else []
        assert json.loads(cli("traces", "stats", *traces, "--json", *flags)) == ppol_rs.traces_stats(traces, domain=domain)

    cli("reference", *traces, "--feature-set", "v2", "-o", str(tmp_path / "ref.json"))
    ppol_rs.HumanReference.from_traces(traces, feature_set="v2").save(str(tmp_path / "ref-py.json"))
    assert json.loads((tmp_path / "ref.json").read_text()) == json.loads((tmp_path / "ref-py.json").read_text())

    study = fixtures / "study"
    answers = [str(study / f) for f in ("answers-a1.json", "label-studio-export-a2.json", "answers-a3.json", "answers-a4.json")]
    for keep in (False, True):
        flags = ["--keep-failed-attention"] if keep else []
        got = json.loads(cli("study", "analyze", *answers, "--key", str(study / "key.json"), "--json", *flags))
        assert got == ppol_rs.study_analyze(answers, str(study / "key.json"), keep_failed_attention=keep)
