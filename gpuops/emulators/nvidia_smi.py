"""A stand-in ``nvidia-smi`` whose output a test controls.

``install(bin_dir, state)`` writes an executable ``bin_dir/nvidia-smi`` (this file, with the
running interpreter in its shebang) and ``bin_dir/nvidia-smi.json`` (the state); put ``bin_dir``
first on the box's PATH. ``set_state(bin_dir, state)`` changes what it reports from then on.
Every call is appended to ``bin_dir/nvidia-smi.calls`` (one line of argv).

State: ``{"mode": "ok" | "driver_failure" | "no_devices", "driver_version": str, "cuda_version": str,
"gpus": [{"name", "memory_total_mib", "memory_used_mib", "utilization_gpu", ...}],
"warning": str (optional), "exit_code": int (optional)}``; any value may be the string ``"[N/A]"``
or ``"[Not Supported]"``, printed as the real tool prints it. ``warning`` is printed on its own line
before the output and ``exit_code`` is returned after a complete output: a GPU with a corrupted
infoROM prints ``WARNING: infoROM is corrupted at gpu 0000:04:00.0`` and exits 14 with valid rows
(``INFOROM``). ``utilization(bin_dir, *percent)`` sets one GPU per percentage (40000 of 81920 MiB
used); ``{"mode": "raw", "stdout": str, "exit_code": int}`` prints ``stdout`` verbatim for any call.

This is the one stand-in ``nvidia-smi`` (tests/box, tests/teardown's ``fake_smi``, the
stand-in SSH boxes, `gpuops demo`'s box). The script runs with ``-S`` (no site import): stdlib only, quick to start
even on a loaded machine, where the on-box agent calls it every sample.

Formats copied from the real tool (driver 550.x): ``--query-gpu=a,b --format=csv[,noheader][,nounits]``
prints ``a, b [unit]`` headers and ``v1, v2`` rows, units ``MiB``, ``%``, ``W``; an unknown field
prints ``Field "x" is not a valid field to query.`` and exits 2; with the driver gone every call
prints ``NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure
that the latest NVIDIA driver is installed and running.`` and exits 9; with no GPU it prints
``No devices were found`` and exits 6. ``-q`` prints the
``==============NVSMI LOG==============`` report, and the bare command the banner table.
"""

from __future__ import annotations  # annotations stay text: the script imports no typing (``-S``, quick)

import json
import os
import sys
import time

DRIVER_FAILURE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)

H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "memory_total_mib": 81559,
    "memory_used_mib": 0,
    "utilization_gpu": 0,
    "utilization_memory": 0,
    "temperature_gpu": 31,
    "power_draw": 69.52,
    "pci_bus_id": "00000000:18:00.0",
    "uuid": "GPU-5e1c1ef4-2c4c-3b2c-9d1e-1f2a3b4c5d6e",
    "compute_cap": "9.0",
}
INFOROM = {"warning": "WARNING: infoROM is corrupted at gpu 0000:18:00.0", "exit_code": 14}
DEFAULT_STATE = {"mode": "ok", "driver_version": "550.54.15", "cuda_version": "12.4", "gpus": [H100]}

# field -> (state key, unit)
FIELDS = {
    "name": ("name", ""),
    "gpu_name": ("name", ""),
    "index": (None, ""),
    "driver_version": ("@driver_version", ""),
    "memory.total": ("memory_total_mib", "MiB"),
    "memory.used": ("memory_used_mib", "MiB"),
    "memory.free": ("@free", "MiB"),
    "utilization.gpu": ("utilization_gpu", "%"),
    "utilization.memory": ("utilization_memory", "%"),
    "temperature.gpu": ("temperature_gpu", ""),
    "power.draw": ("power_draw", "W"),
    "pci.bus_id": ("pci_bus_id", ""),
    "uuid": ("uuid", ""),
    "compute_cap": ("compute_cap", ""),
}


def install(bin_dir: str | os.PathLike[str], state: dict | None = None) -> str:
    """Write ``nvidia-smi`` and its state into ``bin_dir``; returns the script path."""
    os.makedirs(str(bin_dir), exist_ok=True)
    path = os.path.join(str(bin_dir), "nvidia-smi")
    with open(__file__) as f:
        body = f.read()
    with open(path, "w") as f:
        f.write("#!%s -S\n" % sys.executable + body)
    os.chmod(path, 0o755)
    set_state(bin_dir, state or DEFAULT_STATE)
    return path


def set_state(bin_dir: str | os.PathLike[str], state: dict) -> None:
    """Replace what ``bin_dir``'s ``nvidia-smi`` reports (the State above), atomically (a call never reads half)."""
    tmp = os.path.join(str(bin_dir), "nvidia-smi.json.tmp")
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, os.path.join(str(bin_dir), "nvidia-smi.json"))


def utilization(bin_dir: str | os.PathLike[str], *percent: float) -> None:
    """One GPU per value of ``percent`` (utilization.gpu, %), each using 40000 of 81920 MiB."""
    gpus = [dict(H100, utilization_gpu=p, memory_used_mib=40000, memory_total_mib=81920) for p in percent]
    set_state(bin_dir, dict(DEFAULT_STATE, gpus=gpus))


def _value(state: dict, i: int, gpu: dict, field: str, units: bool) -> str:
    key, unit = FIELDS[field]
    v: object  # the GPU's index, or a JSON value of the state
    if key is None:
        v = i
    elif key == "@driver_version":
        v = state.get("driver_version", "[N/A]")
    elif key == "@free":
        t, u = gpu.get("memory_total_mib", "[N/A]"), gpu.get("memory_used_mib", "[N/A]")
        v = "[N/A]" if "[N/A]" in (t, u) else int(t) - int(u)
    else:
        v = gpu.get(key, "[N/A]")
    if v in ("[N/A]", "[Not Supported]"):
        return str(v)
    if isinstance(v, float):
        v = "%.2f" % v
    return "%s %s" % (v, unit) if units and unit else str(v)


def _query(state: dict, fields: list[str], fmt: str) -> int:
    opts = fmt.split(",")
    for f in fields:
        if f not in FIELDS:
            sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % f)
            return 2
    units = "nounits" not in opts
    if "noheader" not in opts:
        sys.stdout.write(", ".join("%s [%s]" % (f, FIELDS[f][1]) if FIELDS[f][1] else f for f in fields) + "\n")
    for i, gpu in enumerate(state.get("gpus", [])):
        sys.stdout.write(", ".join(_value(state, i, gpu, f, units) for f in fields) + "\n")
    return 0


def _report(state: dict) -> int:
    out = [
        "",
        "==============NVSMI LOG==============",
        "",
        "Timestamp                                 : %s" % time.strftime("%a %b %d %H:%M:%S %Y"),
        "Driver Version                            : %s" % state.get("driver_version", "[N/A]"),
        "CUDA Version                              : %s" % state.get("cuda_version", "[N/A]"),
        "",
        "Attached GPUs                             : %d" % len(state.get("gpus", [])),
    ]
    for gpu in state.get("gpus", []):
        out += [
            "GPU %s" % gpu.get("pci_bus_id", "00000000:00:00.0"),
            "    Product Name                          : %s" % gpu.get("name", "[N/A]"),
            "    FB Memory Usage",
            "        Total                             : %s MiB" % gpu.get("memory_total_mib", "[N/A]"),
            "        Used                              : %s MiB" % gpu.get("memory_used_mib", "[N/A]"),
            "    Utilization",
            "        Gpu                               : %s %%" % gpu.get("utilization_gpu", "[N/A]"),
        ]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _banner(state: dict) -> int:
    sys.stdout.write(
        "+-----------------------------------------------------------------------------------------+\n"
        "| NVIDIA-SMI %-12s           Driver Version: %-12s   CUDA Version: %-9s|\n"
        "|-----------------------------------------+------------------------+----------------------+\n"
        % (state.get("driver_version"), state.get("driver_version"), state.get("cuda_version"))
    )
    for i, gpu in enumerate(state.get("gpus", [])):
        sys.stdout.write(
            "|   %d  %-36s|  %6sMiB / %6sMiB |   %3s%%      Default |\n"
            % (i, gpu.get("name"), gpu.get("memory_used_mib"), gpu.get("memory_total_mib"), gpu.get("utilization_gpu"))
        )
    return 0


def main(argv: list[str]) -> int:
    """The script: ``argv`` as the real tool gets it (``argv[0]`` the script in ``bin_dir``); returns its exit code."""
    here = os.path.dirname(os.path.abspath(argv[0]))
    try:
        with open(os.path.join(here, "nvidia-smi.calls"), "a") as f:
            f.write(" ".join(argv[1:]) + "\n")
        with open(os.path.join(here, "nvidia-smi.json")) as f:
            state = json.load(f)
    except OSError:
        state = DEFAULT_STATE
    if state.get("mode") == "driver_failure":
        sys.stdout.write(DRIVER_FAILURE + "\n")
        return 9
    if state.get("mode") == "no_devices":
        sys.stdout.write("No devices were found\n")
        return 6
    if state.get("mode") == "raw":  # output given verbatim (a reading the model above cannot make)
        sys.stdout.write(state.get("stdout", ""))
        return int(state.get("exit_code", 0))
    fields, fmt = None, "csv"
    for a in argv[1:]:
        if a.startswith("--query-gpu="):
            fields = [x.strip() for x in a.split("=", 1)[1].split(",") if x.strip()]
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
    if state.get("warning"):
        sys.stdout.write(state["warning"] + "\n")
    if fields is not None:
        rc = _query(state, fields, fmt)
    elif "-q" in argv[1:] or "--query" in argv[1:]:
        rc = _report(state)
    else:
        rc = _banner(state)
    return rc or int(state.get("exit_code", 0))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
