"""`gpuops demo`: try gpuops without an account.

The project's emulated RunPod and Vast.ai (gpuops/emulators/) run in one background process on
127.0.0.1 with a real sshd on this machine as every box, under a folder of their own
(``demo.demo_home()``: the data directory, its ledger, the spool, the box), never the user's. Every
command pointed at it says SIMULATED and books every rental as simulated (gpuops.config
``SIMULATED_MARKER``). ``demo.py``: start, stop, status and the environment to use it;
``server.py``: the background process, which ends at its deadline whatever happens.
"""
