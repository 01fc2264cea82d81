"""The run configuration's JSON Schema (issue #38): `ppol config schema`, `ppol_rs.config_schema()`
and the copy shipped in the package are the same; the schema accepts what `--print-config`
prints and refuses a misspelt key and a wrong type, as an editor using it would."""

import json
import os
import subprocess
import sys
import pytest

import ppol_rs

jsonschema = pytest.importorskip("jsonschema")
tomllib = pytest.importorskip("tomllib")  # Python 3.11+

HERE = os.path.dirname(os.path.abspath(__file__))
SHIPPED = os.path.join(os.path.dirname(ppol_rs.__file__), "run.schema.json")


def ppol(*args):
    out = subprocess.run([sys.executable, "-m", "ppol_rs", *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_schema_is_the_same_from_the_cli_python_and_the_package():
    schema = ppol_rs.config_schema()
    assert json.loads(ppol("config", "schema")) == schema
    with open(SHIPPED, encoding="utf-8") as f:
        assert json.load(f) == schema, "python/ppol_rs/run.schema.json is stale: ppol config schema -o it"


@pytest.mark.parametrize("llm", [None, "openai:m@http://127.0.0.1:9/v1"])
def test_print_config_validates_and_mistakes_do_not(llm):
    schema = ppol_rs.config_schema()
    args = ["evolve", "--print-config"] + (["--llm", llm] if llm else [])
    cfg = tomllib.loads(ppol(*args))
    jsonschema.validate(cfg, schema)
    misspelt = json.loads(json.dumps(cfg))
    misspelt["search"]["iteratons"] = 3
    with pytest.raises(jsonschema.ValidationError, match="iteratons"):
        jsonschema.validate(misspelt, schema)
    wrong = json.loads(json.dumps(cfg))
    wrong["search"]["iterations"] = "ten"
    with pytest.raises(jsonschema.ValidationError, match="ten"):
        jsonschema.validate(wrong, schema)
    world = json.loads(json.dumps(cfg))
    world["run"]["world"] = "telecom"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(world, schema)
    world["run"]["world"] = "external:python3 sim.py"
    jsonschema.validate(world, schema)
