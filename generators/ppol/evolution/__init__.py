"""Sandbox shim of ``ppol.evolution`` (see ``_generator_utils``)."""
