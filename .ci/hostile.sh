#!/usr/bin/env bash
# The hostile pass (issues #12, #17): bad inputs for every verb's files and config keys, kill -9
# of `ppol evolve` / `ppol resume` at random points then resume (compared with an uninterrupted
# run), kill -9 of a priced LLM run (costs compared with what the mock server counted), and two
# writers on one run directory. Prints its figures; exits non-zero when a check fails.
#
#   .ci/hostile.sh [PPOL_BINARY] [KILLS]      (default target/debug/ppol, 6 kills)
#
# Takes about 2-4 minutes with a debug build on 2 cores (most of it the kill/resume rounds);
# not part of .ci/run for that reason.
set -u
PPOL=${1:-target/debug/ppol}
KILLS=${2:-6}
PPOL=$(realpath "$PPOL")
W=$(mktemp -d /tmp/ppol-hostile-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
cd "$W" || exit 2
started=$(date +%s)
fail=0
tried=0; clear=0; panics=0; unclear=()

# --- 1. bad inputs -------------------------------------------------------------------------
# each case: a name, the text a clear message contains, then the command; a clear error is
# exit 1 or 2 with that text, no panic, and at most $MAXLINES lines (clap's usage included).
bad() {
    local name=$1 expect=$2; shift 2
    tried=$((tried + 1))
    local out code
    out=$(timeout 120 "$@" 2>&1 >/dev/null); code=$?
    if [[ $code == 101 || $out == *panicked* ]]; then
        panics=$((panics + 1)); unclear+=("$name: PANIC: ${out:0:300}")
    elif [[ ($code == 1 || $code == 2) && $out == *"$expect"* && $(wc -l <<<"$out") -le ${MAXLINES:-10} ]]; then
        clear=$((clear + 1))
    else
        unclear+=("$name: exit $code: ${out:0:300}")
    fi
}
cfg() { printf '%b' "$2" >"$1.toml"; echo "$1.toml"; }
printf 'not json\n' >garbage.jsonl
: >empty.jsonl
printf '\x00\x01\x02binary' >binary.py
"$PPOL" evolve --iterations 2 --seed 1 --out done --quiet >/dev/null 2>&1 || { echo "setup run failed"; exit 2; }

bad cfg-missing "nope.toml" "$PPOL" evolve --config nope.toml --quiet
bad cfg-syntax "syntax.toml" "$PPOL" evolve --config "$(cfg syntax '[search\niterations = 3\n')" --quiet
bad cfg-unknown-key "iteratons" "$PPOL" evolve --config "$(cfg unknown '[search]\niteratons = 3\n')" --quiet
bad cfg-negative "neg.toml: line 2" "$PPOL" evolve --config "$(cfg neg '[search]\niterations = -1\n')" --quiet
bad cfg-type "type.toml: line 2" "$PPOL" evolve --config "$(cfg type '[search]\niterations = "x"\n')" --quiet
bad cfg-domain "run.domain" "$PPOL" evolve --config "$(cfg dom '[run]\ndomain = "mars"\n')" --quiet
bad cfg-fraction "val_fraction" "$PPOL" evolve --config "$(cfg frac '[run]\nval_fraction = 2.0\n')" --quiet
bad cfg-nan "lambda_h" "$PPOL" evolve --config "$(cfg nan '[fitness]\nlambda_h = nan\n')" --quiet
bad cfg-timeout "timeout_s" "$PPOL" evolve --config "$(cfg to '[sandbox]\ntimeout_s = -1\n')" --quiet
bad cfg-budget "max_usd" "$PPOL" evolve --config "$(cfg bud '[budget]\nmax_usd = -5\n')" --quiet
bad cfg-metric "fitness_metric" "$PPOL" evolve --config "$(cfg met '[archive]\nfitness_metric = "dice"\n')" --quiet
bad cfg-seed-missing "seed_program" "$PPOL" evolve --config "$(cfg sp '[search]\nseed_program = "/nonexistent.py"\n')" --quiet
bad cfg-llm-key "llm" "$PPOL" evolve --config "$(cfg llm '[llm.default]\nprovider = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\ntemprature = 1\n')" --quiet
bad evolve-human-missing "nope.jsonl" "$PPOL" evolve --human nope.jsonl --quiet
bad evolve-human-garbage "garbage.jsonl" "$PPOL" evolve --human garbage.jsonl --out hg --quiet
bad evolve-human-empty "empty.jsonl" "$PPOL" evolve --human empty.jsonl --out he --quiet
bad evolve-llm-grammar "bogus" "$PPOL" evolve --llm bogus:model --quiet
bad evolve-tau2-missing "tau2" "$PPOL" evolve --tau2-data /nonexistent --quiet
bad evolve-out-file "ofile" bash -c "touch ofile; '$PPOL' evolve --out ofile --iterations 1 --quiet"
bad evolve-out-existing "ppol resume" "$PPOL" evolve --out done --iterations 1 --quiet
MAXLINES=40 bad evolve-seed-binary "seed program failed" "$PPOL" evolve --config "$(cfg sb '[search]\nseed_program = "binary.py"\n')" --out sb --quiet
damaged() { rm -rf "$1"; cp -r done "$1"; }
bad resume-missing-dir "nowhere" "$PPOL" resume nowhere --quiet
bad resume-file "ofile" "$PPOL" resume ofile --quiet
damaged r1; : >r1/config.toml
bad resume-empty-config "config.toml" "$PPOL" resume r1 --quiet
damaged r2; rm r2/config.toml
bad resume-missing-config "config.toml" "$PPOL" resume r2 --quiet
damaged r3; echo 'garbage = = 1' >r3/config.toml
bad resume-garbage-config "config.toml" "$PPOL" resume r3 --quiet
damaged r4; echo '{"iteration": ' >r4/checkpoint.json
bad resume-garbage-checkpoint "checkpoint.json" "$PPOL" resume r4 --quiet
damaged r5; rm r5/checkpoint.json
bad resume-missing-checkpoint "checkpoint.json" "$PPOL" resume r5 --quiet
damaged r6; rm r6/log.jsonl
bad resume-missing-log "log.jsonl" "$PPOL" resume r6 --quiet
damaged r7; sed -i '2s/.*/garbage/' r7/log.jsonl
bad resume-garbage-log "log.jsonl" "$PPOL" resume r7 --quiet
damaged r8; sed -i 's/ppol-run\/1/ppol-run\/9/' r8/checkpoint.json
bad resume-checkpoint-format "format" "$PPOL" resume r8 --quiet
rm -rf r9; mkdir -p r9/baseline; cp done/config.toml r9/; head -1 done/log.jsonl >r9/log.jsonl; printf 'garbage\n{"job":0}\n' >r9/baseline/partial.jsonl
bad resume-garbage-partial-baseline "partial.jsonl" "$PPOL" resume r9 --quiet
damaged r10; echo '{"stuff": 1}' >r10/discriminator.json; rm -f r10/checkpoint.json r10/log.jsonl
bad resume-no-log-but-files "log.jsonl" "$PPOL" resume r10 --quiet
bad resume-iterations "'-3'" "$PPOL" resume done --iterations -3 --quiet
bad report-missing "nowhere" "$PPOL" report nowhere
damaged p1; sed -i '1s/.*/garbage/' p1/log.jsonl
bad report-garbage-log "log.jsonl" "$PPOL" report p1
bad eval-missing "nowhere" "$PPOL" eval nowhere --quiet
bad eval-split "zzz" "$PPOL" eval done --split zzz --quiet
damaged e1; rm e1/best/program.py
bad eval-no-best "program.py" "$PPOL" eval e1 --quiet
bad fingerprint-missing "nope.jsonl" "$PPOL" fingerprint nope.jsonl
bad fingerprint-garbage "garbage.jsonl" "$PPOL" fingerprint garbage.jsonl
bad score-garbage "garbage.jsonl" "$PPOL" score --human garbage.jsonl garbage.jsonl
bad generate-missing-program "nope.py" "$PPOL" generate --program nope.py --domain demo --task 0
bad episodes-garbage-personas "garbage.jsonl" "$PPOL" episodes --domain demo --personas garbage.jsonl --output ep.jsonl

# --- 2. two writers on one run directory --------------------------------------------------
printf '[search]\niterations = 100000\nseed = 3\n' >long.toml
"$PPOL" evolve --config long.toml --out twin --quiet >/dev/null 2>&1 &
holder=$!
for _ in $(seq 600); do grep -q '"event":"checkpoint"' twin/log.jsonl 2>/dev/null && break; sleep 0.1; done
refused=0; writers=0
for v in evolve resume; do
    writers=$((writers + 1))
    if [[ $v == evolve ]]; then out=$("$PPOL" evolve --out twin --iterations 2 --quiet 2>&1); else out=$("$PPOL" resume twin --quiet 2>&1); fi
    [[ $? == 2 && $out == *"pid $holder"* ]] && refused=$((refused + 1))
done
"$PPOL" report twin >/dev/null 2>&1 && reader_ok=yes || reader_ok=no
kill -9 $holder; wait $holder 2>/dev/null

# --- 3. kill -9 at random points, resume, compare with an uninterrupted run ----------------
evaluated() { python3 - "$1" <<'PY'
import json, sys
seq = []
best = None
for l in open(sys.argv[1] + "/log.jsonl"):
    r = json.loads(l)
    if r["event"] == "candidate_evaluated":
        seq.append((r["iteration"], r["program_id"]))
    if r["event"] == "run_stopped":
        best = r["best_program_id"]
print(json.dumps([seq, best]))
PY
}
"$PPOL" evolve --iterations 10 --seed 11 --out full --quiet >/dev/null 2>&1
want=$(evaluated full)
kills=0; identical=0; rounds=0
for k in $(seq "$KILLS"); do
    rounds=$((rounds + 1))
    d=killed$k
    "$PPOL" evolve --iterations 10 --seed 11 --out $d --quiet >/dev/null 2>&1 &
    pid=$!
    sleep "$(python3 -c "import random; print(random.uniform(0.3, 4.0))")"
    kill -9 $pid 2>/dev/null && kills=$((kills + 1)); wait $pid 2>/dev/null
    # a second kill, of the resume, on every other round
    if (( k % 2 == 0 )); then
        "$PPOL" resume $d --quiet >/dev/null 2>&1 &
        pid=$!
        sleep "$(python3 -c "import random; print(random.uniform(0.3, 3.0))")"
        kill -9 $pid 2>/dev/null && kills=$((kills + 1)); wait $pid 2>/dev/null
    fi
    "$PPOL" resume $d --quiet >/dev/null 2>"$d.err" || { echo "resume of $d failed: $(cat $d.err)"; fail=1; continue; }
    [[ $(evaluated $d) == "$want" ]] && identical=$((identical + 1)) || echo "run $d differs from the uninterrupted run"
done

# --- 4. kill -9 of a priced LLM run: costs against what the mock counted -------------------
cat >mock.json <<'JSON'
{"default": {"content": "fine, thanks", "usage": {"prompt_tokens": 100, "completion_tokens": 20}}}
JSON
"$PPOL" mock-server --script mock.json --latency-ms 30 >mock.out 2>/dev/null &
mock=$!
for _ in $(seq 100); do grep -qo 'http://127.0.0.1:[0-9]*' mock.out && break; sleep 0.1; done
base=$(grep -o 'http://127.0.0.1:[0-9]*' mock.out | head -1)
cat >llm.toml <<TOML
[run]
name = "priced"
[search]
iterations = 4
seed = 2
seed_program = "$(realpath "$(dirname "$PPOL")/../../seeds/offline_templates.py" 2>/dev/null || echo seeds/offline_templates.py)"
[episodes]
backend = "llm"
max_turns = 2
val_max_turns = 2
baseline_trials = 1
[llm]
max_retries = 1
[llm.default]
provider = "openai"
model = "mock-model"
base_url = "$base/v1"
[llm.prices."mock-model"]
prompt = 1000.0
completion = 5000.0
TOML
llm_kills=0
"$PPOL" evolve --config llm.toml --out priced --quiet >/dev/null 2>priced.err &
pid=$!
sleep 1.5; kill -9 $pid 2>/dev/null && llm_kills=$((llm_kills + 1)); wait $pid 2>/dev/null
"$PPOL" resume priced --quiet >/dev/null 2>>priced.err &
pid=$!
sleep 2.5; kill -9 $pid 2>/dev/null && llm_kills=$((llm_kills + 1)); wait $pid 2>/dev/null
"$PPOL" resume priced --quiet >/dev/null 2>>priced.err || { echo "priced resume failed: $(tail -3 priced.err)"; fail=1; }
costs=$(python3 - "$base" <<'PY'
import json, sys, urllib.request
stats = json.load(urllib.request.urlopen(sys.argv[1] + "/mock/stats"))
total = None
for l in open("priced/log.jsonl"):
    r = json.loads(l)
    if r["event"] == "run_stopped":
        total = r["cost"]["total"]
procs = len(r["cost"].get("processes", [])) if total else 0
t = total or {"attempts": 0, "prompt_tokens": 0, "completion_tokens": 0}
print(json.dumps({"mock_requests": stats["requests"], "mock_abandoned": stats["abandoned"],
                  "run_requests": t["attempts"], "processes": procs,
                  "mock_tokens": stats["usage"]["prompt_tokens"] + stats["usage"]["completion_tokens"],
                  "run_tokens": t["prompt_tokens"] + t["completion_tokens"]}))
PY
)
kill $mock 2>/dev/null

# --- figures --------------------------------------------------------------------------------
echo "bad inputs: $tried tried, $clear clear errors, $panics panics"
for u in "${unclear[@]}"; do echo "  not clear: $u"; done
echo "two writers: $refused of $writers refused at once naming the holder's pid; reader while locked: $reader_ok"
echo "kill -9 (offline): $kills kills survived over $rounds runs, $identical of $rounds identical to the uninterrupted run"
echo "kill -9 (priced LLM): $llm_kills kills; $costs"
echo "time: $(( $(date +%s) - started )) s"
(( panics == 0 && clear == tried && refused == writers && identical == rounds && fail == 0 )) || exit 1
