"""Offline structural mutation and crossover of a generator program's literal data.

ppol embeds this file and runs it with ``python3 -I -S -X utf8 -c <this file>``. It reads one
JSON request on stdin and writes one JSON answer on stdout:

    {"op": "mutate", "code": "...", "seed": 7,
     "vocabulary": [{"name": "typos", "definition": "...", "on": "...", "off": "..."}]}
    {"op": "crossover", "code": "...", "code_b": "...", "seed": 7}
    {"op": "mutate", "code": "...", "vocabulary": [...], "seeds": [1, 2, 3]}   (batch)
    {"op": "targets", "code": "...", "max_targets": 64}
        -> {"ok": true, "targets": [{"id": "MECHANICS['terse'][1]", "kind": "text", "value": "..."}, ...]}
    {"op": "apply", "code": "...", "max_targets": 64,
     "edits": [{"op": "set", "target": ID, "text": "..."}, {"op": "add", "target": ID, "text": "..."},
               {"op": "number", "target": ID, "value": 0.7}]}
        -> {"ok": true, "code": "...", "summary": "...", "edits": [...], "skipped": ["why", ...]}
    optional in "mutate": "op_weights": {"perturb": 2.0, ...},
                          "mechanics": [{"id": "word_limit", "phrases": ["...", ...]}, ...]

    -> {"ok": true, "code": "...", "summary": "added axis 'typos'; ...", "edits": ["...", ...]}
    -> {"ok": false, "error": "..."}
    -> {"ok": true, "results": [<one answer per seed, as above>]}               (batch)

The program is parsed with ``ast`` and never executed. Only module-level assignments whose
value is a literal (``ast.literal_eval`` succeeds) are touched, and only the source segments
of the edited elements are replaced, so comments and all other code stay byte for byte. The
result is re-parsed and compiled before it is returned. Randomness comes only from
``random.Random(seed)``, so a request always gives the same answer.

Mutation operators (one to three per call, on non-overlapping segments):
  add-axis      append an axis from the vocabulary that DIVERSITY_AXES lacks
  drop-axis     remove an axis (at least one is kept)
  edit-axis     swap in the vocabulary's phrasing of an axis's definition or on/off playbook
  perturb       multiply a number by lognormal noise (clipped to [0, 1] for probabilities)
  dup-fragment  duplicate a string of a list of strings
  drop-fragment remove a string of a list of strings (at least one is kept)
  swap-fragment exchange two strings of a list of strings
  recombine     replace a string by the leading sentences of one fragment joined to the trailing
                sentences of another (cut only between whole sentences, so every sentence of
                the result is a sentence of a parent; one-sentence fragments are not cut)
  add-mechanic  append a canonical sentence of the offline user's mechanics vocabulary
                (fitness/mechanics.toml, passed as "mechanics": [{"id", "phrases"}]) to a list of
                instruction sentences (MECHANICS... first), one the list does not already play
  tune-mechanic move an intensity in an instruction sentence (of any list of them) one or two
                steps along its scale
                (rarely < sometimes < often < usually < always; once < twice < repeatedly;
                slightly < (plain) < very; a word limit "under N words" by a factor)
Crossover takes, for every literal both parents define, the second parent's value with
probability 1/2 (numbers of a numeric dict key by key), and merges DIVERSITY_AXES by union
or intersection of the axis names, each common axis coming from either parent.
"""

import ast
import json
import math
import random
import re
import sys

AXES_NAME = "DIVERSITY_AXES"
STEP = "    "


class Source:
    """Byte-offset view of a program's source (ast columns are UTF-8 byte offsets)."""

    def __init__(self, code):
        self.code = code
        self.b = code.encode("utf-8")
        self.starts = [0] + [m.end() for m in re.finditer(b"\n", self.b)]
        self.nl = "\r\n" if "\r\n" in code else "\n"

    def span(self, node):
        return (
            self.starts[node.lineno - 1] + node.col_offset,
            self.starts[node.end_lineno - 1] + node.end_col_offset,
        )

    def text(self, span):
        return self.b[span[0]:span[1]].decode("utf-8")

    def indent_before(self, pos):
        """The indentation of the line holding pos, if only whitespace precedes pos there."""
        ls = self.b.rfind(b"\n", 0, pos) + 1
        pre = self.b[ls:pos]
        return pre.decode("utf-8") if pre.strip() == b"" else None


def norm(name):
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())


def is_number(node):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if not (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))):
        return False
    if isinstance(node.value, bool):
        return False
    return isinstance(node.value, int) and abs(node.value) < 10**15 or (
        isinstance(node.value, float) and math.isfinite(node.value)
    )


def is_str(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def quote_style(src, node):
    t = src.text(src.span(node)).lstrip("rRbBuU")
    return "'" if t.startswith("'") else '"'


def py_str(s, quote='"'):
    return repr(s) if quote == "'" else json.dumps(s, ensure_ascii=False)


def literal_assignments(tree):
    """name -> value node, for module-level single-name assignments of literals made once."""
    found, count = {}, {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            count[node.target.id] = count.get(node.target.id, 0) + 2
            continue
        else:
            continue
        count[name] = count.get(name, 0) + 1
        try:
            ast.literal_eval(value)
        except Exception:
            continue
        found[name] = value
    return {k: v for k, v in found.items() if count[k] == 1}


def dict_fields(node):
    """Key (normalised str) -> value node of an ast.Dict with constant keys."""
    out = {}
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values):
            if isinstance(k, ast.Constant):
                key = k.value
                if isinstance(key, bool):
                    key = "true" if key else "false"
                out[str(key)] = v
    return out


class Axis:
    def __init__(self, node):
        self.node = node
        f = dict_fields(node)
        self.name = ast.literal_eval(f["behavior"]) if "behavior" in f and is_str(f["behavior"]) else None
        self.fields = {}
        if "definition" in f and is_str(f["definition"]):
            self.fields["definition"] = f["definition"]
        p = dict_fields(f.get("presence"))
        if "true" in p and is_str(p["true"]):
            self.fields["on"] = p["true"]
        if "false" in p and is_str(p["false"]):
            self.fields["off"] = p["false"]


def axes_list(literals):
    node = literals.get(AXES_NAME)
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Dict) for e in node.elts):
        return node
    return None


def collect_targets(name, node, numbers, str_lists, path=None):
    """Numbers (with a probability flag) and lists of strings inside a literal."""
    path = path or name
    if is_number(node):
        v = ast.literal_eval(node)
        numbers.append((path, node, isinstance(v, float) and 0.0 <= v <= 1.0))
        return
    if isinstance(node, (ast.List, ast.Tuple)):
        if node.elts and all(is_str(e) for e in node.elts):
            str_lists.append((path, node))
            return
        children = [(f"{path}[{i}]", e) for i, e in enumerate(node.elts)]
    elif isinstance(node, ast.Dict):
        children = [(f"{path}[{ast.literal_eval(k)!r}]", v) for k, v in zip(node.keys, node.values) if k is not None]
    else:
        return
    nums = [ast.literal_eval(c) for _, c in children if is_number(c)]
    prob = bool(nums) and all(0.0 <= x <= 1.0 for x in nums) and any(isinstance(x, float) for x in nums)
    for p, c in children:
        if is_number(c):
            numbers.append((p, c, prob))
        else:
            collect_targets(name, c, numbers, str_lists, p)


class Patch:
    """Non-overlapping byte edits on the original source."""

    def __init__(self, src):
        self.src = src
        self.edits = []

    def free(self, start, end):
        return all(end < s or e < start for s, e, _ in self.edits)

    def add(self, start, end, text):
        if not self.free(start, end):
            return False
        self.edits.append((start, end, text))
        return True

    def apply(self):
        b = self.src.b
        for s, e, t in sorted(self.edits, key=lambda x: (x[0], x[1]), reverse=True):
            b = b[:s] + t.encode("utf-8") + b[e:]
        return b.decode("utf-8")


def element_sep(src, elts, i):
    """Separator to put before a new element inserted after element i."""
    ind = src.indent_before(src.span(elts[i])[0])
    return "," + src.nl + ind if ind is not None else ", "


def insert_after_last(patch, src, seq_node, text):
    """Append an element (its source text) to a list/tuple literal."""
    if seq_node.elts:
        last = seq_node.elts[-1]
        end = src.span(last)[1]
        return patch.add(end, end, element_sep(src, seq_node.elts, len(seq_node.elts) - 1) + text)
    s, e = src.span(seq_node)
    pos = e - 1  # before the closing bracket
    return patch.add(pos, pos, text)


def remove_element(patch, src, seq_node, i):
    elts = seq_node.elts
    if i + 1 < len(elts):
        return patch.add(src.span(elts[i])[0], src.span(elts[i + 1])[0], "")
    return patch.add(src.span(elts[i - 1])[1], src.span(elts[i])[1], "")


def remove_elements(patch, src, seq_node, indices):
    """Remove several elements (not all of them), merging consecutive runs into one edit."""
    elts, idx = seq_node.elts, sorted(set(indices))
    if not idx or len(idx) >= len(elts):
        return False
    runs, start = [], idx[0]
    for a, b in zip(idx, idx[1:] + [None]):
        if b != a + 1:
            runs.append((start, a))
            start = b
    spans = []
    for i, j in runs:
        if j + 1 < len(elts):
            spans.append((src.span(elts[i])[0], src.span(elts[j + 1])[0]))
        else:
            spans.append((src.span(elts[i - 1])[1], src.span(elts[j])[1]))
    if not all(patch.free(s, e) for s, e in spans):
        return False
    for s, e in spans:
        patch.add(s, e, "")
    return True


def reindent(text, old_indent, new_indent, nl):
    if old_indent is None or new_indent is None or old_indent == new_indent or '"""' in text or "'''" in text:
        return text
    lines = text.split("\n")
    out = [lines[0]]
    for ln in lines[1:]:
        out.append(new_indent + ln[len(old_indent):] if ln.startswith(old_indent) else ln)
    return "\n".join(out)


def render_axis(entry, indent, quote, nl):
    i1, i2 = indent + STEP, indent + STEP + STEP
    q = lambda s: py_str(s, quote)
    return (
        "{" + nl
        + f"{i1}{q('behavior')}: {q(entry['name'])},{nl}"
        + f"{i1}{q('definition')}: {q(entry['definition'])},{nl}"
        + f"{i1}{q('presence')}: {{{nl}"
        + f"{i2}{q('true')}: {q(entry['on'])},{nl}"
        + f"{i2}{q('false')}: {q(entry['off'])},{nl}"
        + f"{i1}}},{nl}"
        + indent + "}"
    )


def fmt_number(v):
    return str(v) if isinstance(v, int) else repr(v)


def perturb_value(rng, old, prob):
    for _ in range(20):
        if isinstance(old, int):
            factor = math.exp(rng.gauss(0.0, 0.35))
            new = int(round(old * factor))
            if old >= 1:
                new = max(1, new)
            if new == old:
                new = old + 1 if (old <= 1 or rng.random() < 0.5) else old - 1
            return new
        if old == 0.0:
            new = rng.uniform(0.05, 0.3)
        else:
            new = old * math.exp(rng.gauss(0.0, 0.3))
        if prob:
            new = min(1.0, max(0.0, new))
        new = round(new, 3)
        if new != old:
            return new
    return None


SENTENCE_END = re.compile(r"(?<![.])[.!?]['\")]?\s+(?=[A-Z\"'(])")


def split_points(s):
    """Where ``s`` may be cut so that both sides are whole sentences: after a sentence's end
    (``.``, ``!`` or ``?``, not an ellipsis) followed by a capital, outside parentheses. A
    one-sentence string has none: cutting it mid-sentence ("mention it" + "and polite even
    when ...") made ungrammatical persona text."""
    pts = []
    for m in SENTENCE_END.finditer(s):
        before = s[:m.end()]
        if before.count("(") == before.count(")") and 0 < m.end() < len(s):
            pts.append(m.end())
    return pts


def sentences(s):
    """The sentences of ``s`` (cut at :func:`split_points`)."""
    cuts = [0] + split_points(s) + [len(s)]
    return [s[a:b].strip() for a, b in zip(cuts, cuts[1:]) if s[a:b].strip()]


def recombine(rng, a, b):
    pa, pb = split_points(a), split_points(b)
    if not pa or not pb:
        return None
    head = a[: rng.choice(pa)].rstrip()
    tail = b[rng.choice(pb):].lstrip()
    if not head or not tail:
        return None
    out = head + " " + tail
    # the check on the edited text: every sentence is a whole sentence of a parent
    whole = set(sentences(a)) | set(sentences(b))
    if any(x not in whole for x in sentences(out)):
        return None
    return out if out not in (a, b) else None


def as_sentence(text, like):
    """An LLM's replacement or addition for a list of instruction sentences, checked as one:
    when ``like`` (the text it replaces, or a sentence of the list) is an instruction sentence,
    the new text starts with a capital, ends with a sentence's punctuation and repeats no word
    twice in a row ("the the"); small slips are repaired rather than the edit lost."""
    if not is_instruction(like):
        return text
    out = re.sub(r"\b(\w+)(\s+\1\b)+", r"\1", text, flags=re.I)
    if out[:1].islower():
        out = out[0].upper() + out[1:]
    if out[-1:] not in ".!?)'\"":
        out = out.rstrip(",;: ") + "."
    return out


# Intensity scales of instruction sentences (the words fitness/mechanics.toml reads).
FREQUENCY_SCALE = ["rarely", "sometimes", "often", "usually", "always"]
COUNT_SCALE = ["once", "twice", "repeatedly"]
STRENGTH_SCALE = ["slightly", "", "very"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                "eighteen", "nineteen", "twenty"]
WORD_LIMIT = re.compile(
    r"\b(under|below|fewer than|less than|at most|no more than|within|up to|around|about)\s+"
    r"(\d+|" + "|".join(NUMBER_WORDS) + r")\s+words?\b", re.I)
SCALE_WORD = re.compile(r"\b(" + "|".join(FREQUENCY_SCALE + COUNT_SCALE) + r")\b", re.I)
STRENGTH_WORD = re.compile(r"\b(slightly|very)\b", re.I)
STRENGTH_TARGET = re.compile(r"\b(irritated|angry|upset|frustrated|annoyed|impatient|polite|formal|calm|brief|"
                             r"guarded|skeptical|doubtful|warm|friendly|curt)\b", re.I)


def _case_like(word, model):
    return word.capitalize() if model[:1].isupper() else word


def tune_sentence(rng, text):
    """Move one intensity of an instruction sentence along its scale; None if it has none."""
    options = []
    for m in WORD_LIMIT.finditer(text):
        options.append(("limit", m))
    for m in SCALE_WORD.finditer(text):
        options.append(("scale", m))
    for m in STRENGTH_WORD.finditer(text):
        options.append(("strength", m))
    if not STRENGTH_WORD.search(text):
        for m in STRENGTH_TARGET.finditer(text):
            options.append(("intensify", m))
    if not options:
        return None
    kind, m = rng.choice(options)
    step = rng.choice([-2, -1, -1, 1, 1, 2])
    if kind == "limit":
        raw = m.group(2).lower()
        n = int(raw) if raw.isdigit() else NUMBER_WORDS.index(raw)
        new_n = max(3, min(40, int(round(n * math.exp(rng.gauss(0.0, 0.35))))))
        if new_n == n:
            new_n = n + (1 if rng.random() < 0.5 else -1) if n > 3 else n + 1
        word = NUMBER_WORDS[new_n] if not raw.isdigit() and new_n < len(NUMBER_WORDS) else str(new_n)
        return text[:m.start(2)] + word + text[m.end(2):], f"limit {raw}→{word}"
    if kind == "scale":
        w = m.group(1)
        scale = FREQUENCY_SCALE if w.lower() in FREQUENCY_SCALE else COUNT_SCALE
        i = scale.index(w.lower())
        j = max(0, min(len(scale) - 1, i + step))
        if j == i:
            j = i - 1 if i > 0 else i + 1
        new = _case_like(scale[j], w)
        return text[:m.start(1)] + new + text[m.end(1):], f"{w.lower()}→{scale[j]}"
    if kind == "strength":
        w = m.group(1)
        if w.lower() == "very":
            # drop it (plain) or soften it
            new = "" if rng.random() < 0.5 else _case_like("slightly", w)
        else:
            new = "" if rng.random() < 0.5 else _case_like("very", w)
        out = text[:m.start(1)] + new + text[m.end(1):]
        out = re.sub(r"  +", " ", out)
        return out, f"{w.lower()}→{new.lower() or '(plain)'}"
    w = m.group(1)
    new = ("very " if rng.random() < 0.6 else "slightly ") + w
    return text[:m.start(1)] + new + text[m.end(1):], f"{w.lower()}→{new.lower()}"


def is_instruction(s):
    s = s.strip()
    return len(s.split()) >= 3 and s[-1:] in ".!?)" and "{" not in s


class Mutator:
    def __init__(self, code, vocabulary, rng, op_weights=None, mechanics=None, axis_evidence=None):
        self.op_weights = {str(k): float(v) for k, v in (op_weights or {}).items()}
        # per axis: mean P(human) of the parent's personas with the axis on minus with it off
        self.axis_evidence = {
            str(k): float(v) for k, v in (axis_evidence or {}).items()
            if isinstance(v, (int, float)) and math.isfinite(v)
        }
        self.src = Source(code)
        self.tree = ast.parse(code)
        self.rng = rng
        self.literals = literal_assignments(self.tree)
        self.axes = axes_list(self.literals)
        self.axis_objs = [Axis(e) for e in self.axes.elts] if self.axes is not None else []
        self.n_axes = len(self.axis_objs)
        self.vocab = {}
        for v in vocabulary or []:
            if all(isinstance(v.get(k), str) and v.get(k).strip() for k in ("name", "definition", "on", "off")):
                self.vocab.setdefault(norm(v["name"]), []).append(v)
        self.numbers, self.str_lists = [], []
        for name in sorted(self.literals):
            if name == AXES_NAME and self.axes is not None:
                continue
            collect_targets(name, self.literals[name], self.numbers, self.str_lists)
        self.mechanics = []
        for m in mechanics or []:
            phrases = [p for p in (m.get("phrases") or []) if isinstance(p, str) and p.strip()]
            if isinstance(m.get("id"), str) and phrases:
                self.mechanics.append((m["id"], phrases))
        # lists of instruction sentences: MECHANICS-like literals first, else any sentence list
        sentence_lists = [
            (p, n) for p, n in self.str_lists
            if n.elts and all(is_instruction(ast.literal_eval(e)) for e in n.elts)
        ]
        preferred = [(p, n) for p, n in sentence_lists if "MECHANIC" in p.upper()]
        self.instruction_lists = preferred or sentence_lists
        # intensities are tuned in every list of instruction sentences (arcs, openers, ...)
        self.tunable_lists = sentence_lists
        self.patch = Patch(self.src)
        self.added = set()
        self.dropped = set()
        self.touched_lists = {}

    # Each operator returns a description, or None when it does not apply / conflicts.
    def op_add_axis(self):
        if self.axes is None:
            return None
        have = {norm(a.name) for a in self.axis_objs if a.name} | self.added
        names = sorted(n for n in self.vocab if n not in have)
        if not names:
            return None
        entry = self.rng.choice(self.vocab[self.rng.choice(names)])
        if self.axes.elts:
            indent = self.src.indent_before(self.src.span(self.axes.elts[-1])[0])
            strings = [n for n in ast.walk(self.axes.elts[-1]) if is_str(n)]
            quote = quote_style(self.src, strings[0]) if strings else '"'
        else:
            indent, quote = None, '"'
        text = render_axis(entry, indent if indent is not None else "", quote, self.src.nl)
        if not insert_after_last(self.patch, self.src, self.axes, text):
            return None
        self.added.add(norm(entry["name"]))
        self.n_axes += 1
        extra = self.extend_axis_dicts(entry["name"])
        return f"added axis '{entry['name']}'" + extra

    def extend_axis_dicts(self, name):
        """Give an added axis an entry in every module-level dict of numbers keyed by the axis
        names (e.g. placement weights), so later perturbations can tune it."""
        axis_names = {a.name for a in self.axis_objs if a.name}
        notes = []
        for var, node in sorted(self.literals.items()):
            if not isinstance(node, ast.Dict) or not node.keys or var == AXES_NAME:
                continue
            keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
            if not all(isinstance(k, str) for k in keys) or not set(keys) <= axis_names or len(keys) < 2:
                continue
            if not all(is_number(v) for v in node.values) or name in keys:
                continue
            vals = [ast.literal_eval(v) for v in node.values]
            prob = all(0.0 <= v <= 1.0 for v in vals)
            value = round(self.rng.uniform(0.1, 0.9), 3) if prob else vals[-1]
            quote = quote_style(self.src, node.keys[0])
            end = self.src.span(node.values[-1])[1]
            if self.patch.add(end, end, ", %s: %s" % (py_str(name, quote), fmt_number(value))):
                notes.append(f"{var}['{name}']={fmt_number(value)}")
        return (" (" + ", ".join(notes) + ")") if notes else ""

    def op_drop_axis(self):
        if self.axes is None or self.n_axes < 2:
            return None
        i = self.rng.randrange(len(self.axis_objs))
        if i in self.dropped or not remove_element(self.patch, self.src, self.axes, i):
            return None
        self.dropped.add(i)
        self.n_axes -= 1
        return f"dropped axis '{self.axis_objs[i].name or i}'"

    def op_edit_axis(self):
        options = []
        for i, a in enumerate(self.axis_objs):
            if i in self.dropped or not a.name:
                continue
            for entry in self.vocab.get(norm(a.name), []):
                for field, node in sorted(a.fields.items()):
                    if entry[field].strip() != ast.literal_eval(node).strip():
                        options.append((a, field, node, entry[field]))
        if not options:
            return None
        a, field, node, text = self.rng.choice(options)
        s, e = self.src.span(node)
        if not self.patch.add(s, e, py_str(text, quote_style(self.src, node))):
            return None
        label = {"definition": "definition", "on": "'true' playbook", "off": "'false' playbook"}[field]
        return f"rephrased axis '{a.name}' {label}"

    def op_perturb(self):
        if not self.numbers:
            return None
        path, node, prob = self.rng.choice(self.numbers)
        old = ast.literal_eval(node)
        new = perturb_value(self.rng, old, prob)
        if new is None:
            return None
        s, e = self.src.span(node)
        if not self.patch.add(s, e, fmt_number(new)):
            return None
        return f"weight {path} {fmt_number(old)}→{fmt_number(new)}"

    def op_fragment(self):
        if not self.str_lists:
            return None
        path, node = self.rng.choice(self.str_lists)
        n = len(node.elts)
        kinds = ["duplicate"] + (["drop", "swap", "recombine"] if n >= 2 else [])
        kind = self.rng.choice(kinds)
        src, rng = self.src, self.rng
        values = [ast.literal_eval(e) for e in node.elts]
        if kind == "duplicate":
            i = rng.randrange(n)
            if not insert_after_last(self.patch, src, node, src.text(src.span(node.elts[i]))):
                return None
            return f"duplicated fragment {path}[{i}]"
        if kind == "drop":
            kept = self.touched_lists.get(id(node), n)
            if kept < 2:
                return None
            i = rng.randrange(n)
            if not remove_element(self.patch, src, node, i):
                return None
            self.touched_lists[id(node)] = kept - 1
            return f"dropped fragment {path}[{i}]"
        i, j = rng.sample(range(n), 2)
        if kind == "swap":
            if values[i] == values[j]:
                return None
            si, sj = src.span(node.elts[i]), src.span(node.elts[j])
            if not (self.patch.free(*si) and self.patch.free(*sj)):
                return None
            self.patch.add(si[0], si[1], src.text(sj))
            self.patch.add(sj[0], sj[1], src.text(si))
            return f"swapped fragments {path}[{i}] and {path}[{j}]"
        new = recombine(rng, values[i], values[j])
        if new is None:
            return None
        s, e = src.span(node.elts[i])
        if not self.patch.add(s, e, py_str(new, quote_style(src, node.elts[i]))):
            return None
        return f"recombined fragments {path}[{i}]+{path}[{j}]"

    def placement_dicts(self):
        """Module-level dicts of probabilities keyed by axis names (e.g. placement weights)."""
        axis_names = {a.name for a in self.axis_objs if a.name}
        found = []
        for var, node in sorted(self.literals.items()):
            if not isinstance(node, ast.Dict) or not node.keys or var == AXES_NAME:
                continue
            keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
            if not all(isinstance(k, str) for k in keys) or not set(keys) <= axis_names:
                continue
            if not all(is_number(v) for v in node.values):
                continue
            vals = [ast.literal_eval(v) for v in node.values]
            if all(0.0 <= v <= 1.0 for v in vals):
                found.append((var, dict(zip(keys, node.values))))
        return found

    def op_steer_axis(self):
        """Move an axis's placement probability toward the state whose personas the
        discriminator found more human in the parent's own evaluation (axis_evidence), all the
        way (half of the time) or by a random 40-100 % of the distance; an axis is chosen with probability proportional to the
        square of its effect."""
        if not self.axis_evidence:
            return None
        options = []
        for var, entries in self.placement_dicts():
            for name, node in sorted(entries.items()):
                effect = self.axis_evidence.get(name)
                if effect is None or abs(effect) < 0.02:
                    continue
                old = ast.literal_eval(node)
                target = 1.0 if effect > 0 else 0.0
                if abs(target - old) < 0.01:
                    continue
                options.append((var, name, node, old, target, effect))
        if not options:
            return None
        # squared: the axis with the clearest evidence is steered most often, and an effect
        # that is mostly batch noise only rarely
        var, name, node, old, target, effect = self.rng.choices(
            options, weights=[o[5] ** 2 for o in options]
        )[0]
        # half of the steps go all the way: one placement state for every persona
        share = 1.0 if self.rng.random() < 0.5 else self.rng.uniform(0.4, 1.0)
        new = round(old + (target - old) * share, 3)
        s, e = self.src.span(node)
        if new == old or not self.patch.add(s, e, fmt_number(new)):
            return None
        return f"steered {var}['{name}'] {fmt_number(old)}→{fmt_number(new)} (P(human) {effect:+.2f} with it on)"

    def op_add_mechanic(self):
        if not self.mechanics or not self.instruction_lists:
            return None
        path, node = self.rng.choice(self.instruction_lists)
        present = " ".join(ast.literal_eval(e).lower() for e in node.elts)
        options = [(i, p) for i, ps in self.mechanics for p in ps if p.lower() not in present]
        if not options:
            return None
        mid, phrase = self.rng.choice(options)
        quote = quote_style(self.src, node.elts[0]) if node.elts else '"'
        if not insert_after_last(self.patch, self.src, node, py_str(phrase, quote)):
            return None
        return f"added mechanic '{mid}' to {path}"

    def mechanics_dict(self):
        """MECHANICS-like literal: a dict of axis name -> {"true": [sentences], ...}."""
        for var, node in sorted(self.literals.items()):
            if "MECHANIC" not in var.upper() or not isinstance(node, ast.Dict) or not node.keys:
                continue
            # kinds of users: every entry has a "true" playbook and none a "false" one
            if all(isinstance(v, ast.Dict) and set(dict_fields(v)) == {"true"} for v in node.values):
                return var, node
        return None

    def op_add_kind(self):
        """A new axis made of two to four mechanics of the vocabulary (one canonical sentence
        each, from different mechanics), with its playbook in the MECHANICS dict and an entry in
        every dict of axis weights: a new kind of user the search can then weigh."""
        found = self.mechanics_dict()
        if self.axes is None or not self.mechanics or found is None:
            return None
        var, mdict = found
        have = {norm(a.name) for a in self.axis_objs if a.name} | self.added
        name = None
        for _ in range(8):
            cand = "kind_%04x" % self.rng.getrandbits(16)
            if cand not in have:
                name = cand
                break
        if name is None:
            return None
        picks = self.rng.sample(self.mechanics, min(len(self.mechanics), self.rng.randint(2, 4)))
        phrases = [self.rng.choice(ps) for _, ps in picks]
        entry = {
            "name": name,
            "definition": "A kind of user who plays: %s." % ", ".join(i for i, _ in picks),
            "on": phrases[0],
            "off": "Not this kind of user.",
        }
        if self.axes.elts:
            indent = self.src.indent_before(self.src.span(self.axes.elts[-1])[0])
            strings = [n for n in ast.walk(self.axes.elts[-1]) if is_str(n)]
            quote = quote_style(self.src, strings[0]) if strings else '"'
        else:
            indent, quote = None, '"'
        text = render_axis(entry, indent if indent is not None else "", quote, self.src.nl)
        end = self.src.span(mdict.values[-1])[1]
        body = ", ".join(py_str(p, quote) for p in phrases)
        if not self.patch.free(end, end):
            return None
        if not insert_after_last(self.patch, self.src, self.axes, text):
            return None
        self.patch.add(end, end, ", %s: {%s: [%s]}" % (py_str(name, quote), py_str("true", quote), body))
        self.added.add(name)
        self.n_axes += 1
        extra = self.extend_axis_dicts(name)
        return f"added kind '{name}' ({', '.join(i for i, _ in picks)})" + extra

    def op_tune_mechanic(self):
        options = []
        for path, node in self.tunable_lists:
            for i, e in enumerate(node.elts):
                options.append((path, i, e))
        self.rng.shuffle(options)
        for path, i, e in options[:12]:
            tuned = tune_sentence(self.rng, ast.literal_eval(e))
            if tuned is None:
                continue
            text, what = tuned
            s, t = self.src.span(e)
            if not self.patch.add(s, t, py_str(text, quote_style(self.src, e))):
                return None
            return f"tuned {path}[{i}] {what}"
        return None

    def run(self):
        ops = [
            ("add-axis", self.op_add_axis, 2),
            ("drop-axis", self.op_drop_axis, 1),
            ("edit-axis", self.op_edit_axis, 2),
            ("perturb", self.op_perturb, 2),
            ("fragment", self.op_fragment, 2),
            ("add-mechanic", self.op_add_mechanic, 2),
            ("tune-mechanic", self.op_tune_mechanic, 2),
            ("steer-axis", self.op_steer_axis, 2),
        ]
        # programs made of kinds of users (seeds/offline_population.py) can also get new kinds;
        # other programs draw from the same operators as before
        if self.mechanics_dict() is not None:
            ops.append(("add-kind", self.op_add_kind, 2))
        n_edits = 1 + (self.rng.random() < 0.35) + (self.rng.random() < 0.1)
        done = []
        for _ in range(n_edits):
            for _attempt in range(12):
                names = [o for o in ops if self.op_weights.get(o[0], o[2]) > 0] or ops
                weights = [self.op_weights.get(n, w) for n, _, w in names]
                _, fn, _ = self.rng.choices(names, weights=weights)[0]
                desc = fn()
                if desc:
                    done.append(desc)
                    break
        if not done:
            # Try every operator once in a fixed order before giving up.
            for _, fn, _ in ops:
                desc = fn()
                if desc:
                    done.append(desc)
                    break
        if not done:
            raise NoEdit("no mutable literal data: the program has no DIVERSITY_AXES list the vocabulary can extend or edit, no numbers and no lists of strings at module level")
        return self.patch.apply(), done


class NoEdit(Exception):
    pass


def crossover(code_a, code_b, rng):
    src_a, src_b = Source(code_a), Source(code_b)
    lit_a = literal_assignments(ast.parse(code_a))
    lit_b = literal_assignments(ast.parse(code_b))
    common = sorted(set(lit_a) & set(lit_b))
    if not common:
        raise NoEdit("the parents share no module-level literal assignment")
    for _attempt in range(20):
        patch = Patch(src_a)
        done = []
        for name in common:
            na, nb = lit_a[name], lit_b[name]
            va, vb = ast.literal_eval(na), ast.literal_eval(nb)
            if va == vb:
                continue
            if name == AXES_NAME and axes_list(lit_a) is not None and axes_list(lit_b) is not None:
                done += cross_axes(patch, src_a, src_b, na, nb, rng)
            elif (
                isinstance(na, ast.Dict) and isinstance(nb, ast.Dict)
                and all(is_number(v) for v in na.values) and all(is_number(v) for v in nb.values)
            ):
                fb = dict_fields(nb)
                for k, v in sorted(dict_fields(na).items()):
                    if k in fb and ast.literal_eval(v) != ast.literal_eval(fb[k]) and rng.random() < 0.5:
                        s, e = src_a.span(v)
                        patch.add(s, e, src_b.text(src_b.span(fb[k])))
                        done.append(f"{name}[{k!r}] {fmt_number(ast.literal_eval(v))}→{fmt_number(ast.literal_eval(fb[k]))} from B")
            elif rng.random() < 0.5:
                s, e = src_a.span(na)
                if patch.add(s, e, src_b.text(src_b.span(nb))):
                    done.append(f"took {name} from B")
        if done:
            return patch.apply(), done
    raise NoEdit("the parents' shared literals are identical; nothing to cross over")


def cross_axes(patch, src_a, src_b, na, nb, rng):
    axes_a = [Axis(e) for e in na.elts]
    axes_b = [Axis(e) for e in nb.elts]
    names_a = [norm(a.name) if a.name else None for a in axes_a]
    by_b = {norm(b.name): b for b in axes_b if b.name}
    done = []
    union = rng.random() < 0.5
    common = [i for i, n in enumerate(names_a) if n in by_b]
    if not union and common:
        drop = [i for i, n in enumerate(names_a) if n not in by_b]
        if drop and remove_elements(patch, src_a, na, drop):
            done.append("axes intersection: dropped " + ", ".join(f"'{axes_a[i].name or i}'" for i in drop))
    else:
        new = [b for b in axes_b if b.name and norm(b.name) not in names_a]
        if na.elts:
            ind_a = src_a.indent_before(src_a.span(na.elts[-1])[0])
        else:
            ind_a = None
        texts = []
        for b in new:
            t = src_b.text(src_b.span(b.node))
            texts.append(reindent(t, src_b.indent_before(src_b.span(b.node)[0]), ind_a, src_a.nl))
        if texts:
            if na.elts:
                sep = element_sep(src_a, na.elts, len(na.elts) - 1)
                end = src_a.span(na.elts[-1])[1]
                patch.add(end, end, sep + sep.join(texts))
            else:
                pos = src_a.span(na)[1] - 1
                patch.add(pos, pos, ", ".join(texts))
            done.append("axes union: added " + ", ".join(f"'{b.name}'" for b in new))
    for i in common:
        a, b = axes_a[i], by_b[names_a[i]]
        if ast.literal_eval(a.node) != ast.literal_eval(b.node) and rng.random() < 0.5:
            s, e = src_a.span(a.node)
            t = reindent(src_b.text(src_b.span(b.node)), src_b.indent_before(src_b.span(b.node)[0]),
                         src_a.indent_before(s), src_a.nl)
            if patch.add(s, e, t):
                done.append(f"took axis '{a.name}' from B")
    return done


# ---------------------------------------------------------------------------------------------
# Data-level edits given by a caller (the LLM's structured mutations): "targets" lists what may
# be edited, "apply" applies edits to those targets. Only literal data is touched, so an edit
# can change what the program says, never whether it runs.

TEXT_MAX = 400  # longer strings (whole prompts) are not offered as targets


def literal_targets(code, max_targets=64):
    """Editable targets of a program's literal data, most behaviour-relevant first:
    [{"id", "kind": "text"|"list"|"number", "value", "prob"?}], and id -> (kind, node)."""
    tree = ast.parse(code)
    literals = literal_assignments(tree)
    found = []  # (rank, order, entry, node)

    def rank_of(name, value=None):
        if name == AXES_NAME:
            return 0
        if name.startswith("MECHANICS") or (isinstance(value, str) and is_instruction(value)):
            return 1
        return 2

    def text_ok(v):
        return isinstance(v, str) and v.strip() and len(v) <= TEXT_MAX and "{" not in v and "}" not in v

    def walk(name, path, node, key=None):
        if key == "behavior":
            return  # an axis's name: placements refer to it
        if is_str(node):
            if text_ok(node.value):
                found.append((rank_of(name, node.value), len(found),
                              {"id": path, "kind": "text", "value": node.value}, node))
            return
        if is_number(node):
            v = ast.literal_eval(node)
            found.append((1, len(found), {"id": path, "kind": "number", "value": v}, node))
            return
        if isinstance(node, (ast.List, ast.Tuple)):
            strs = node.elts and all(is_str(e) for e in node.elts)
            if strs and all(text_ok(e.value) for e in node.elts):
                found.append((min(1, rank_of(name, node.elts[0].value)), len(found),
                              {"id": path, "kind": "list", "value": f"{len(node.elts)} sentences"}, node))
            for i, e in enumerate(node.elts):
                walk(name, f"{path}[{i}]", e)
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, (str, int)) and not isinstance(k.value, bool):
                    walk(name, f"{path}[{k.value!r}]", v, k.value)

    for name, node in literals.items():
        # private names and resource budgets (token caps, excerpt sizes, key lists) are not
        # behaviour
        if name.startswith("_") or any(w in name for w in ("TOKENS", "CHARS", "KEYS")):
            continue
        walk(name, name, node)
    found.sort(key=lambda x: (x[0], x[1]))
    chosen = found[:max_targets]
    chosen.sort(key=lambda x: x[1])
    targets, nodes = [], {}
    for _, _, entry, node in chosen:
        if entry["kind"] == "number":
            v = entry["value"]
            entry["prob"] = isinstance(v, float) and 0.0 <= v <= 1.0
        targets.append(entry)
        nodes[entry["id"]] = (entry["kind"], node, entry.get("prob", False))
    return targets, nodes


def apply_edits(code, edits, max_targets=64, text_max=TEXT_MAX):
    """Apply [{"op": "set", "target", "text"} | {"op": "add", "target", "text"} |
    {"op": "number", "target", "value"}] to the program's literal data."""
    _, nodes = literal_targets(code, max_targets)
    src = Source(code)
    patch = Patch(src)
    done, skipped = [], []
    for i, e in enumerate(edits if isinstance(edits, list) else []):
        if not isinstance(e, dict):
            skipped.append(f"edit {i + 1}: not an object")
            continue
        op, target = e.get("op"), e.get("target")
        if target not in nodes:
            skipped.append(f"edit {i + 1}: unknown target {str(target)[:80]!r}")
            continue
        kind, node, prob = nodes[target]
        want = {"set": "text", "add": "list", "number": "number"}.get(op)
        if want is None or want != kind:
            skipped.append(f"edit {i + 1}: '{op}' does not apply to {kind} target {target}")
            continue
        if op in ("set", "add"):
            text = e.get("text")
            if not isinstance(text, str) or not text.strip():
                skipped.append(f"edit {i + 1}: empty text")
                continue
            text = " ".join(text.split())
            like = node.value if op == "set" else next(
                (x.value for x in node.elts if is_str(x)), "")
            text = as_sentence(text, like)
            if len(text) > text_max:
                skipped.append(f"edit {i + 1}: text longer than {text_max} characters")
                continue
            if op == "set":
                if text == node.value:
                    skipped.append(f"edit {i + 1}: {target} unchanged")
                    continue
                ok = patch.add(*src.span(node), py_str(text, quote_style(src, node)))
                label = f"set {target}"
            else:
                if any(is_str(x) and x.value == text for x in node.elts):
                    skipped.append(f"edit {i + 1}: {target} already holds that sentence")
                    continue
                q = quote_style(src, node.elts[0]) if node.elts else '"'
                ok = insert_after_last(patch, src, node, py_str(text, q))
                label = f"added to {target}"
        else:
            v = e.get("value")
            if isinstance(v, str):
                try:
                    v = float(v)
                except ValueError:
                    v = None
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                skipped.append(f"edit {i + 1}: value of {target} is not a number")
                continue
            old = ast.literal_eval(node)
            if prob:
                v = min(1.0, max(0.0, float(v)))
            if isinstance(old, int):
                v = int(round(v))
            if v == old:
                skipped.append(f"edit {i + 1}: {target} unchanged")
                continue
            ok = patch.add(*src.span(node), fmt_number(round(v, 4) if isinstance(v, float) else v))
            label = f"{target} {fmt_number(old)}→{fmt_number(v)}"
        if ok:
            done.append(label)
        else:
            skipped.append(f"edit {i + 1}: overlaps an earlier edit")
    if not done:
        raise NoEdit("no edit applied: " + ("; ".join(skipped) if skipped else "no edits given"))
    return patch.apply(), done, skipped


def verify(code, original):
    tree = ast.parse(code)
    compile(code, "<mutant>", "exec", dont_inherit=True)
    if code == original:
        raise NoEdit("the edits left the program unchanged")
    old_axes = axes_list(literal_assignments(ast.parse(original)))
    if old_axes is not None:
        lit = literal_assignments(tree)
        node = lit.get(AXES_NAME)
        if node is None:
            raise NoEdit("DIVERSITY_AXES is no longer a literal after the edit")
        value = ast.literal_eval(node)
        if old_axes.elts and not value:
            raise NoEdit("the edit removed every axis")


def answer(req, seed):
    try:
        rng = random.Random(int(seed))
        code = req["code"]
        try:
            ast.parse(code)
        except SyntaxError as e:
            raise NoEdit(f"the program does not parse: line {e.lineno}: {e.msg}")
        if req.get("op") == "targets":
            targets, _ = literal_targets(code, int(req.get("max_targets", 64)))
            return {"ok": True, "targets": targets}
        if req.get("op") == "apply":
            new, edits, skipped = apply_edits(
                code, req.get("edits"), int(req.get("max_targets", 64)), int(req.get("text_max", TEXT_MAX))
            )
            verify(new, code)
            return {"ok": True, "code": new, "summary": "; ".join(edits), "edits": edits, "skipped": skipped}
        if req.get("op") == "crossover":
            try:
                ast.parse(req["code_b"])
            except SyntaxError as e:
                raise NoEdit(f"the second parent does not parse: line {e.lineno}: {e.msg}")
            new, edits = crossover(code, req["code_b"], rng)
            summary = "crossover: " + "; ".join(edits)
        elif req.get("op") == "mutate":
            new, edits = Mutator(
                code, req.get("vocabulary") or [], rng, req.get("op_weights"), req.get("mechanics"),
                req.get("axis_evidence"),
            ).run()
            summary = "; ".join(edits)
        else:
            raise NoEdit(f"unknown op {req.get('op')!r}")
        verify(new, code)
        return {"ok": True, "code": new, "summary": summary, "edits": edits}
    except NoEdit as e:
        return {"ok": False, "error": str(e)}
    except SyntaxError as e:
        return {"ok": False, "error": f"internal error: the edited program does not parse (line {e.lineno}: {e.msg})"}
    except (KeyError, ValueError, TypeError) as e:
        return {"ok": False, "error": f"bad request or program: {type(e).__name__}: {e}"}
    except Exception as e:  # never crash: the caller records the reason and moves on
        return {"ok": False, "error": f"internal error: {type(e).__name__}: {e}"}


def main():
    try:
        req = json.loads(sys.stdin.read())
    except ValueError as e:
        out = {"ok": False, "error": f"bad request: {e}"}
    else:
        if isinstance(req.get("seeds"), list):
            out = {"ok": True, "results": [answer(req, s) for s in req["seeds"]]}
        else:
            out = answer(req, req.get("seed", 0))
    sys.stdout.write(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
