"""Fixtures for the notify tests: the emulators (shared fixtures)."""

from tests.support.emulators import emulator_env, runpod_emulator, vast_emulator  # noqa: F401
