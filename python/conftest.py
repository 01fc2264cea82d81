"""Shared by the package's doctests (python/ppol_rs) and the tests (python/tests)."""

import tempfile

import pytest
from _pytest.doctest import DoctestItem


@pytest.fixture(autouse=True)
def _doctest_temporary_files(request, tmp_path, monkeypatch):
    """The docstrings' examples write where a user would (`tempfile.mkdtemp()`); under pytest
    that lands in the test's own temporary directory, which pytest prunes, not in /tmp, where
    every CI run used to leave a dozen run directories behind."""
    if isinstance(request.node, DoctestItem):
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield
