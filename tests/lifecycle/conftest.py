"""Fixtures for the lifecycle tests: the stand-in nvidia-smi and the emulators (shared fixtures)."""

from tests.support.emulators import emulator_env, runpod_emulator, vast_emulator  # noqa: F401
from tests.teardown.conftest import fake_smi, rig  # noqa: F401
