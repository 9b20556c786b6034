"""The emulated providers: RunPod (REST v2 and its GraphQL balance) and Vast.ai (REST) on 127.0.0.1.

Stateful HTTP servers that speak each provider's wire protocol, keep instance state and a billing
clock, and can inject faults. The test suite drives them (tests/support/emulators.py) and `gpuops demo`
runs them for a user without an account. They import nothing of gpuops.
"""
