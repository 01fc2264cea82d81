import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
DEMO = ROOT / "fitness" / "demo"


def shared_dir():
    d = pathlib.Path(os.environ.get("PPOL_SHARED", ROOT.parent / "shared"))
    if (d / "parity").is_dir():
        return d
    if os.environ.get("PPOL_REQUIRE_SHARED") == "1":
        raise RuntimeError(f"PPOL_REQUIRE_SHARED=1 but {d} does not exist")
    return None


@pytest.fixture
def shared():
    d = shared_dir()
    if d is None:
        pytest.skip("../shared not found")
    return d
