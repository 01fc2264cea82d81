"""An example external user simulator for the JSONL-over-stdio protocol (used by
test_external.py). It answers every episode with a short retail dialogue whose user turns are
shaped by the persona's axis placement: `terse` → short lowercase turns, `verbose` → long
polite ones, `frustrated` → complaints and exclamation marks.

Run by the driver, e.g.::

    python python/tests/example_external_simulator.py [--fail-on ID] [--garbage-on ID]
        [--hang-on ID] [--exit-on ID]

The flags make it misbehave on one request id, for the error-reporting tests.
"""

import argparse
import sys
import time

from ppol_rs.external import serve


def user_turn(text, placement):
    if placement.get("frustrated"):
        text = "this is ridiculous! " + text + "!!"
    if placement.get("verbose"):
        text = (
            "Hello there, I hope you are having a good day. I am writing because "
            + text
            + ", and I would really appreciate it if you could help me sort it out today."
        )
    if placement.get("terse"):
        text = " ".join(text.lower().replace(",", "").split()[:6])
    return text


def dialogue(request):
    placement = request.get("persona", {}).get("axis_placement", {}) or {}
    context = request.get("task_context") or "I need help with an order"
    turns = [
        ("assistant", "Hi! How can I help you today?"),
        ("user", user_turn(f"i need help: {context}", placement)),
        ("assistant", "Sure. Could you give me your order number?"),
        ("user", user_turn("the order number is W2371", placement)),
        ("assistant", "Thanks, that is done. Anything else?"),
        ("user", user_turn("no thanks, bye", placement)),
    ]
    return {
        "conversation": [{"role": r, "content": c} for r, c in turns],
        "reward": 1.0,
        "meta": {"seed": request.get("seed"), "placement": placement},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fail-on")
    ap.add_argument("--garbage-on")
    ap.add_argument("--hang-on")
    ap.add_argument("--exit-on")
    ap.add_argument("--bad-role-on")
    args = ap.parse_args()

    def handler(request):
        rid = request["id"]
        print(f"example simulator: episode {rid}", file=sys.stderr)
        if rid == args.fail_on:
            raise RuntimeError("persona not supported")
        if rid == args.garbage_on:
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
        if rid == args.hang_on:
            time.sleep(60)
        if rid == args.exit_on:
            sys.exit(3)
        d = dialogue(request)
        if rid == args.bad_role_on:
            # bypass serve()'s own validation: write a bad dialogue directly
            import json

            sys.stdout.write(
                json.dumps({"type": "dialogue", "id": rid, "conversation": [{"role": "robot", "content": "x"}]})
                + "\n"
            )
            sys.stdout.flush()
            time.sleep(60)
        return d

    serve(handler)


if __name__ == "__main__":
    main()
