#!/usr/bin/env bash
# The hostile pass (issues #12, #17, #34): bad inputs for every verb's files and config keys, kill -9
# of `ppol evolve` / `ppol resume` at random points then resume (compared with an uninterrupted
# run), kill -9 of a priced LLM run (costs compared with what the mock server counted), two
# writers on one run directory, and hostile worlds (#34: simulators that leave orphans, answer a
# million turns, hang; huge durations, negative flags, foreign and edited checkpoints, control
# characters in task ids and model names, devices as inputs, a model slower than a generator's
# wall clock). Prints its figures; exits non-zero when a check fails.
#
#   .ci/hostile.sh [PPOL_BINARY] [KILLS]      (default target/debug/ppol, 6 kills)
#
# The binary needs the mock server: `cargo build --features testing` (what `cargo test` builds).
#
# Takes about 4-6 minutes with a debug build on 2 cores (most of it the kill/resume rounds);
# not part of .ci/run for that reason.
set -u
PPOL=${1:-target/debug/ppol}
KILLS=${2:-6}
PPOL=$(realpath "$PPOL")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIM="$ROOT/tests/fixtures/worlds/hostile_sim.py"
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


# --- 5. issue #34: worlds that cannot hurt the run -----------------------------------------
printf '{"task_id": "t%d", "context": "return item %d"}\n' 0 0 1 1 2 2 3 3 >tasks.jsonl
# bad inputs of #34: each a clear error naming its key or flag, exit 2, no panic
for key in "world]\nepisode_timeout_s" "search]\nmax_wall_clock_s" "sandbox]\ntimeout_s"; do
    bad "cfg-1e300-${key##*n}" "${key##*n}" "$PPOL" evolve --config "$(cfg big "[$key = 1e300\n")" --quiet
done
LLMCFG='[llm.default]\nprovider = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
bad cfg-1e300-llm-timeout "timeout_s" "$PPOL" evolve --config "$(cfg lt "${LLMCFG}timeout_s = 1e300\n")" --quiet
bad cfg-1e300-llm-deadline "deadline_s" "$PPOL" evolve --config "$(cfg ld "${LLMCFG}deadline_s = 1e300\n")" --quiet
bad cfg-1e300-endpoint-wait "endpoint_wait_s" "$PPOL" evolve --config "$(cfg lw "[llm]\nendpoint_wait_s = 1e300\n${LLMCFG}")" --quiet
bad flag-1e300-episode-timeout "--episode-timeout-s" "$PPOL" episodes --domain demo --episode-timeout-s 1e300 -o x.jsonl
for flag in "episodes --episode-timeout-s" "episodes --trials" "episodes --seed" "evolve --iterations" "evolve --world-processes" \
            "generate --timeout" "bench world --episodes" "score --lambda-h" "export sft --max-tokens" "mock-server --latency-ms"; do
    bad "negative ${flag}" "${flag##* }" "$PPOL" $flag -1
done
bad bench-world-1e9 "--episodes" "$PPOL" bench world --episodes 1000000000
bad external-missing "run.world" "$PPOL" episodes --world external:/nonexistent --task-file tasks.jsonl -o x.jsonl
bad chat-no-prompt "world.system_prompt" "$PPOL" evolve --world chat --task-file tasks.jsonl --llm openai:m@http://127.0.0.1:9/v1 --quiet
: >empty_prompt.md
bad chat-empty-prompt "empty_prompt.md is empty" "$PPOL" evolve --world chat --task-file tasks.jsonl --system-prompt-file empty_prompt.md --llm openai:m@http://127.0.0.1:9/v1 --quiet
t0=$(date +%s.%N)
bad task-file-dev-zero "/dev/zero" "$PPOL" episodes --world "external:python3 $SIM" --task-file /dev/zero -o x.jsonl
bad config-dev-zero "/dev/zero" "$PPOL" evolve --config /dev/zero --quiet
bad prompt-dev-zero "a system prompt" "$PPOL" episodes --world chat --task-file tasks.jsonl --system-prompt-file /dev/zero --llm openai:m@http://127.0.0.1:9/v1 -o x.jsonl
devices_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")

# orphans: a simulator that ignores SIGTERM, SIGHUP and end of input, with a child and a setsid
# daemon each; survivors 2 s after ppol exits normally, and after kill -9
orphans() {  # $1 = normal | kill
    local mark=ppol-hostile-orphan-$1-$$
    "$PPOL" episodes --world "external:python3 $SIM --orphans $mark --sleep-ms 300" --task-file tasks.jsonl \
        --world-processes 2 -o orph-$1.jsonl --quiet >/dev/null 2>&1 &
    local pid=$! seen=0
    for _ in $(seq 300); do seen=$(pgrep -fc "$mark"); (( seen >= 6 )) && break; sleep 0.1; done
    if [[ $1 == kill ]]; then kill -9 $pid; fi
    wait $pid 2>/dev/null
    sleep 2
    echo "$seen $(pgrep -f "$mark" | xargs -r ps -o stat= -p 2>/dev/null | grep -vc Z)"
}
read -r orph_seen_n orph_left_n <<<"$(orphans normal)"
read -r orph_seen_k orph_left_k <<<"$(orphans kill)"
(( orph_left_n == 0 && orph_left_k == 0 && orph_seen_n >= 6 && orph_seen_k >= 6 )) || fail=1

# a million turns: peak memory and what was recorded
rss() { awk '/Maximum resident/ {print int($6 / 1024)}' "$1"; }
/usr/bin/time -v "$PPOL" episodes --world "external:python3 $SIM --turns 1000000" --task-file tasks.jsonl \
    --world-processes 2 -o million.jsonl --quiet >/dev/null 2>million.time
million_ep_rss=$(rss million.time)
million_ep=$(python3 -c "import json; print(', '.join(sorted({e['status'] + ': ' + (e.get('error') or '')[:60] for e in map(json.loads, open('million.jsonl'))})))")
/usr/bin/time -v "$PPOL" episodes --world "external:python3 $SIM --turns 200000" --task-file tasks.jsonl \
    --world-processes 2 --max-turns 30 -o cut.jsonl --quiet >/dev/null 2>cut.time
cut_rss=$(rss cut.time)
cut_ep=$(python3 -c "import json; print(sorted({e['termination'] + ': ' + (e.get('notes') or [''])[0][:70] for e in map(json.loads, open('cut.jsonl'))}))")
/usr/bin/time -v "$PPOL" evolve --world "external:python3 $SIM --turns 200000" --task-file tasks.jsonl \
    --iterations 2 --seed 3 --out cut-run --quiet >cut-run.out 2>cut-run.time
cut_run_code=$?
cut_run_rss=$(rss cut-run.time)
cut_run_failed=$(grep -o '([0-9]* failed)' cut-run.out)
/usr/bin/time -v "$PPOL" evolve --world "external:python3 $SIM --turns 1000000" --task-file tasks.jsonl \
    --iterations 2 --seed 3 --out million-run --quiet >million-run.out 2>million-run.time
million_run_code=$?
million_run_rss=$(rss million-run.time)
million_run_says=$(grep '^error' million-run.time | cut -c1-200)
million_run_failed=$(python3 -c "import json; es = [json.loads(l) for l in open('million-run/baseline/episodes.jsonl')]; print(len([e for e in es if e['status'] == 'failed']), 'of', len(es))" 2>/dev/null)
(( million_ep_rss < 500 && cut_rss < 500 && cut_run_rss < 500 && million_run_rss < 500 )) || fail=1

# an unanswered v2 request fails alone
"$PPOL" episodes --world "external:python3 $SIM --v2 --hang-on t0 --sleep-ms 700 --max-in-flight 2" --task-file tasks.jsonl \
    --world-protocol 2 --world-processes 1 --episode-timeout-s 2 -o hang.jsonl --quiet >/dev/null 2>&1
hang_failed=$(python3 -c "import json; print([e['task_id'] for e in map(json.loads, open('hang.jsonl')) if e['status'] == 'failed'])")
[[ $hang_failed == "['t0']" ]] || fail=1

# control characters: simulator stderr, task ids (report.html, checkpoint.json, eval-test.json), model names
"$PPOL" episodes --world "external:python3 $SIM --stderr-escapes" --task-file tasks.jsonl -o esc.jsonl --quiet >/dev/null 2>esc.err
raw() { python3 -c "import sys; t = open(sys.argv[1], encoding='utf-8', errors='replace').read(); print(sum(1 for c in t if (ord(c) < 32 and c not in '\n\t') or 0x7f <= ord(c) < 0xa0 or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069))" "$1"; }
stderr_raw=$(raw esc.err)
python3 - <<'PY'
import json
ids = ["t\x1b[2Jesc", "t\x07bel\x00nul", "t\u202egnp.exe", "plain"]
with open("ctl_tasks.jsonl", "w") as f:
    for i, t in enumerate(ids):
        f.write(json.dumps({"task_id": t, "context": "return item %d" % i, "split": "test" if i == 0 else "train"}) + "\n")
PY
"$PPOL" evolve --world "external:python3 $SIM" --task-file ctl_tasks.jsonl --iterations 2 --seed 5 --out ctl --quiet >/dev/null 2>&1
"$PPOL" report ctl >/dev/null 2>&1
"$PPOL" eval ctl --n 1 --quiet >/dev/null 2>&1
ctl_report=$(raw ctl/report.html); ctl_checkpoint=$(raw ctl/checkpoint.json); ctl_eval=$(raw ctl/eval-test.json 2>/dev/null || echo "?")
PPOL_LLM_MODEL=$'evil\e[31m\u202emodel' "$PPOL" episodes --domain demo --tasks 0 --llm "openai@http://127.0.0.1:9/v1" -o model.jsonl --quiet >/dev/null 2>model.err
model_raw=$(raw model.err)
(( stderr_raw == 0 && ctl_report == 0 && ctl_checkpoint == 0 && model_raw == 0 )) || fail=1

# checkpoints: another run's, and hand-edited ones, are refused on resume naming what differs
cp_refused=0; cp_tried=0; cp_says=()
checkpoint_case() {  # name, expected text, python edit of the checkpoint text (variable t)
    cp_tried=$((cp_tried + 1))
    rm -rf "cp-$1"; cp -r done "cp-$1"
    python3 - "cp-$1/checkpoint.json" "$3" <<'PY'
import sys
p, edit = sys.argv[1], sys.argv[2]
t = open(p).read()
ns = {"t": t}
exec(edit, ns)
open(p, "w").write(ns["t"])
PY
    local out; out=$("$PPOL" resume "cp-$1" --quiet 2>&1); local code=$?
    if [[ $code == 2 && $out == *"$2"* ]]; then cp_refused=$((cp_refused + 1)); cp_says+=("$1: ${out:0:260}"); else echo "checkpoint $1: exit $code: ${out:0:300}"; fi
}
"$PPOL" evolve --iterations 2 --seed 2 --out other --quiet >/dev/null 2>&1
checkpoint_case foreign "another run" "t = open('other/checkpoint.json').read()"
checkpoint_case best-id "is not a program of this run" "import json, re; t = re.sub(r'\"program_id\":\"[^\"]*\"', '\"program_id\":\"never-was\"', t, count=1)"
checkpoint_case train-score "best.metrics.combined" "import re; t = re.sub(r'(\"best\":\{\"program_id\":\"[^\"]*\",\"metrics\":\{\"combined\":)[0-9.e-]*', r'\g<1>7.5', t, count=1)"
checkpoint_case code "code" "import json; d = json.loads(t); d['best']['code'] = 'import os\\n' + d['best']['code']; t = json.dumps(d, ensure_ascii=False, separators=(',', ':'))"
checkpoint_case stagnation "changed after ppol wrote it" "import re; t = re.sub(r'\"stagnation\":[0-9]+', '\"stagnation\":0', t) if '\"stagnation\":0' not in t else t.replace('\"stagnation\":0', '\"stagnation\":3')"
(( cp_refused == cp_tried )) || fail=1

# a model slower than the generator's wall clock (1.5 s per call, --timeout 1): it finishes
"$PPOL" mock-server --latency-ms 1500 --script <(echo '{"rules": [{"contains": "Invent exactly", "reply": {"content": "[{\"persona_id\": \"Ann\", \"description\": \"d\", \"axis_placement\": {\"terse\": true}, \"reasoning\": \"r\"}]"}}], "default": {"content": "You type in lowercase."}}') >slow.out 2>/dev/null &
slow=$!
for _ in $(seq 100); do grep -qo 'http://127.0.0.1:[0-9]*' slow.out 2>/dev/null && break; sleep 0.1; done
slow_base=$(grep -o 'http://127.0.0.1:[0-9]*' slow.out | head -1)
t0=$(date +%s.%N)
"$PPOL" generate --program "$ROOT/seeds/two_stage_llm.py" --task "Change my flight." -n 1 --llm "openai:m@$slow_base/v1" --timeout 1 -o slow.jsonl 2>slow.err >/dev/null
slow_code=$?
slow_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
kill $slow 2>/dev/null
(( slow_code == 0 )) || { fail=1; echo "slow model: $(tail -3 slow.err)"; }

# --- figures --------------------------------------------------------------------------------
echo "bad inputs: $tried tried, $clear clear errors, $panics panics"
for u in "${unclear[@]}"; do echo "  not clear: $u"; done
echo "two writers: $refused of $writers refused at once naming the holder's pid; reader while locked: $reader_ok"
echo "kill -9 (offline): $kills kills survived over $rounds runs, $identical of $rounds identical to the uninterrupted run"
echo "kill -9 (priced LLM): $llm_kills kills; $costs"
echo "#34 orphans: simulator processes seen $orph_seen_n / $orph_seen_k, alive 2 s after a normal exit: $orph_left_n, after kill -9: $orph_left_k"
echo "#34 a million turns: episodes peak RSS $million_ep_rss MB ($million_ep); 200,000 turns cut at --max-turns 30: peak RSS $cut_rss MB ($cut_ep)"
echo "#34 evolve in a world of 200,000-turn answers: exit $cut_run_code, peak RSS $cut_run_rss MB, summary $cut_run_failed"
echo "#34 evolve in a world of 1,000,000-turn answers: exit $million_run_code, peak RSS $million_run_rss MB, baseline episodes failed: $million_run_failed; $million_run_says"
echo "#34 unanswered v2 request: failed episodes $hang_failed"
echo "#34 raw control characters: simulator stderr $stderr_raw, report.html $ctl_report, checkpoint.json $ctl_checkpoint, eval-test.json $ctl_eval (eval.rs: the lead's), model name on stderr $model_raw"
echo "#34 devices as inputs (task file, config, system prompt from /dev/zero): refused in $devices_s s together"
echo "#34 checkpoints refused on resume: $cp_refused of $cp_tried (another run's, best id, train score 7.5, code, other field)"
for c in "${cp_says[@]}"; do echo "  $c"; done
echo "#34 generator with a model slower than its wall clock: exit $slow_code in $slow_s s"
echo "time: $(( $(date +%s) - started )) s"
(( panics == 0 && clear == tried && refused == writers && identical == rounds && fail == 0 )) || exit 1
