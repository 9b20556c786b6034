"""The suite's side of the provider emulators (gpuops/emulators/): the providers' published specs
plugged in as their contract (RunPod REST v2 plus its GraphQL balance, Vast.ai REST;
tests/emulators/contract.py, with the development-only validators), and the suite's reserved ports
(tests/support/ports.py). Importing this package plugs both in for every emulator made afterwards;
tests/conftest.py imports it first. See tests/support/emulators.py for the fixtures that start them."""

from gpuops.emulators import base as _base
from gpuops.emulators.runpod import RunPodEmulator
from gpuops.emulators.vast import VastEmulator
from tests.emulators import contract
from tests.support.ports import reserved_port

_base.contract_for = contract.Contract
_base.port_for = reserved_port

__all__ = ["RunPodEmulator", "VastEmulator", "contract"]
