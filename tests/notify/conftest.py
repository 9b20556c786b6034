"""Fixtures for the notify tests: the emulators, the real sshd and the spot run's rig (shared fixtures)."""

from tests.box.conftest import client_key, data_dir, smi_bin, sshd, sshd_unstarted  # noqa: F401
from tests.lifecycle.test_spot_recover import rig  # noqa: F401
from tests.support.emulators import emulator_env, runpod_emulator, vast_emulator, vast_provider  # noqa: F401
