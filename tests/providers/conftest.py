from tests.support.emulators import emulator_env, runpod_emulator, runpod_provider, vast_emulator, vast_provider  # noqa: F401
