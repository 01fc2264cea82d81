"""A deterministic user simulator for the Ray executor's tests (protocol version 1, standard
library only, does not import ppol or Ray).

The dialogue depends on the persona's text and the episode's seed only, so the same plan gives
the same episodes on any process, actor or node. ``--sleep-ms`` makes each episode take that
long; ``--marker`` is ignored (tests find their processes by it); ``--llm`` calls the model
endpoint ppol gives simulators (``$PPOL_LLM_BASE_URL``), once without the token (the status is
recorded in ``meta.unauthorized_status``) and once with ``$PPOL_LLM_API_KEY`` as the user
simulator, whose answer opens the dialogue.
"""
import argparse
import json
import os
import random
import sys
import time
import urllib.error
import urllib.request

def call(body, token):
    req = urllib.request.Request(os.environ["PPOL_LLM_BASE_URL"] + "/chat/completions",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def say(text, persona, rng):
    p = persona.lower()
    if "greeting" in p:
        text = "Hello there! " + text
    if "irritated" in p or "sharply" in p:
        text = "This is the second time this happens. " + text
    if "twelve words" in p or "fragments" in p:
        text = " ".join(text.split()[:8])
    if "exclamation" in p or "emoji" in p:
        text += "!"
    if "lowercase" in p:
        text = text.lower().replace(",", "")
    if "typo" in p and rng.random() < 0.5:
        text = text.replace("the ", "teh ", 1)
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sleep-ms", type=float, default=0.0)
    ap.add_argument("--marker", default="")
    ap.add_argument("--llm", action="store_true")
    args = ap.parse_args()
    for line in sys.stdin:
        req = json.loads(line)
        if req["type"] == "shutdown":
            break
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)
        rng, text = random.Random(req["seed"]), req["persona"]["text"]
        need = req["task_context"].split(".")[0].strip()
        meta = {}
        opening = "Hi! How can I help you today?"
        if args.llm:
            body = {"model": "user-sim", "messages": [{"role": "user", "content": need}]}
            meta["unauthorized_status"] = call(body, None)[0]
            status, answer = call(body, os.environ.get("PPOL_LLM_API_KEY"))
            meta["status"] = status
            if answer:
                opening = answer["choices"][0]["message"]["content"] or opening
        script = [(opening, f"I need help: {need}."),
                  ("Sure. Could you give me your order or reservation number?",
                   "It is W2371, and the name is Yusuf Rossi.")]
        if "push back" in text.lower() or "how they know" in text.lower():
            script.append(("The fee is 50 dollars.", "Why 50? Which rule says that?"))
        script.append(("Done. Anything else?", "No, thanks, that is all."))
        conv = []
        for k, (agent, user) in enumerate(script):
            stop = " ###STOP###" if k == len(script) - 1 else ""
            conv += [{"role": "assistant", "content": agent},
                     {"role": "user", "content": say(user, text, rng) + stop}]
        print(json.dumps({"type": "dialogue", "id": req["id"], "conversation": conv, "reward": 1.0,
                          "meta": meta}), flush=True)


if __name__ == "__main__":
    main()
