"""Sandbox shim of the ppol 0.1.1 Python package: only what generator programs import."""
