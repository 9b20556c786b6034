"""`gpuops demo env` and `demo env --unset`: the lines a shell evaluates, for literal environments.

What a user expects of ``eval "$(gpuops demo env)"`` then ``eval "$(gpuops demo env --unset)"``:
the shell exactly as it was, their own key and ledger back, nothing of the demo left. The real
shells run these lines in tests/demo/test_demo.py (the running demo)."""

from __future__ import annotations

from pathlib import Path

from gpuops.demo.demo import DemoPaths, DemoState, export_lines, unset_lines

HOME = "/home/ann/.local/share/gpuops-demo"
PATHS = DemoPaths(Path(HOME))
STATE = DemoState(4242, 0.0, 3600.0, "http://127.0.0.1:40001", "http://127.0.0.1:40002", "", "")
DEMO_EXPORTS = [
    f"export GPUOPS_DATA_DIR={HOME}/data",
    f"export GPUOPS_LEDGER_URL=sqlite:///{HOME}/data/ledger.db",
    f"export GPUOPS_SPOOL_DIR={HOME}/spool",
    f"export GPUOPS_SPOOL_FALLBACK_DIR={HOME}/spool-fallback",
    "export GPUOPS_PROVIDERS_RUNPOD_URL=http://127.0.0.1:40001",
    "export GPUOPS_PROVIDERS_VAST_URL=http://127.0.0.1:40002",
    "export RUNPOD_API_KEY=rp_DEMO_SIMULATED",
    "export VAST_API_KEY=vast_DEMO_SIMULATED",
    f"export GPUOPS_AGENT_ENVIRON_FILE={HOME}/box/pid1-environ",
    "export GPUOPS_NOTIFY_URLS='[]'",
    "export GPUOPS_NOTIFY_DEADMAN_URL=''",
]
ALL_DEMO = (
    "GPUOPS_DATA_DIR GPUOPS_LEDGER_URL GPUOPS_SPOOL_DIR GPUOPS_SPOOL_FALLBACK_DIR GPUOPS_PROVIDERS_RUNPOD_URL"
    " GPUOPS_PROVIDERS_VAST_URL RUNPOD_API_KEY VAST_API_KEY GPUOPS_AGENT_ENVIRON_FILE GPUOPS_NOTIFY_URLS"
    " GPUOPS_NOTIFY_DEADMAN_URL"
)


def test_env_first_keeps_what_the_shell_had_without_printing_it():
    mine = {"RUNPOD_API_KEY": "rp_mine", "GPUOPS_LEDGER_URL": "postgresql://ann@db/books", "PATH": "/bin"}
    assert export_lines(PATHS, STATE, mine) == [
        '_GPUOPS_DEMO_WAS_GPUOPS_LEDGER_URL="$GPUOPS_LEDGER_URL"',  # the shell copies it: never printed
        '_GPUOPS_DEMO_WAS_RUNPOD_API_KEY="$RUNPOD_API_KEY"',
        "export _GPUOPS_DEMO_SAVED='GPUOPS_LEDGER_URL RUNPOD_API_KEY'",
        *DEMO_EXPORTS,
    ]
    assert export_lines(PATHS, STATE, {"PATH": "/bin"}) == ["export _GPUOPS_DEMO_SAVED=''", *DEMO_EXPORTS]
    # a second `demo env` in a shell already pointed at the demo keeps the first record
    again = {"_GPUOPS_DEMO_SAVED": "GPUOPS_LEDGER_URL RUNPOD_API_KEY", "RUNPOD_API_KEY": "rp_DEMO_SIMULATED"}
    assert export_lines(PATHS, STATE, again) == DEMO_EXPORTS


def test_unset_gives_back_what_the_shell_had_and_unsets_the_rest(tmp_path):
    paths = DemoPaths(tmp_path / "gpuops-demo")
    record = {"_GPUOPS_DEMO_SAVED": "GPUOPS_LEDGER_URL RUNPOD_API_KEY", "RUNPOD_API_KEY": "rp_DEMO_SIMULATED"}
    assert unset_lines(paths, record) == [
        'if [ -n "${_GPUOPS_DEMO_WAS_GPUOPS_LEDGER_URL+x}" ]; then export GPUOPS_LEDGER_URL="$_GPUOPS_DEMO_WAS_GPUOPS_LEDGER_URL";'
        " else unset GPUOPS_LEDGER_URL; fi",
        'if [ -n "${_GPUOPS_DEMO_WAS_RUNPOD_API_KEY+x}" ]; then export RUNPOD_API_KEY="$_GPUOPS_DEMO_WAS_RUNPOD_API_KEY";'
        " else unset RUNPOD_API_KEY; fi",
        "unset GPUOPS_DATA_DIR GPUOPS_SPOOL_DIR GPUOPS_SPOOL_FALLBACK_DIR GPUOPS_PROVIDERS_RUNPOD_URL"
        " GPUOPS_PROVIDERS_VAST_URL VAST_API_KEY GPUOPS_AGENT_ENVIRON_FILE GPUOPS_NOTIFY_URLS GPUOPS_NOTIFY_DEADMAN_URL",
        "unset _GPUOPS_DEMO_SAVED _GPUOPS_DEMO_WAS_GPUOPS_LEDGER_URL _GPUOPS_DEMO_WAS_RUNPOD_API_KEY",
    ]
    # a shell that had none of them: every one the demo set goes, then the record
    assert unset_lines(paths, {"_GPUOPS_DEMO_SAVED": ""}) == [f"unset {ALL_DEMO}", "unset _GPUOPS_DEMO_SAVED"]
    # the record is input: a name the demo never sets is no line of shell
    assert unset_lines(paths, {"_GPUOPS_DEMO_SAVED": "PATH $(rm -rf ~) GPUOPS_DATA_DIR"})[0].startswith(
        'if [ -n "${_GPUOPS_DEMO_WAS_GPUOPS_DATA_DIR+x}" ]'
    )
    assert "rm" not in "".join(unset_lines(paths, {"_GPUOPS_DEMO_SAVED": "PATH $(rm -rf ~)"}))


def test_unset_without_a_record_unsets_only_the_demo_values(tmp_path):
    """Variables set by hand (or by a gpuops before the record): only those holding what `demo env`
    exports are the demo's; the user's own are left, and so are URLs no running demo vouches for."""
    home = tmp_path / "gpuops-demo"
    paths = DemoPaths(home)
    shell = {
        "GPUOPS_DATA_DIR": f"{home}/data",
        "RUNPOD_API_KEY": "rp_DEMO_SIMULATED",
        "VAST_API_KEY": "vast_mine",
        "GPUOPS_LEDGER_URL": "postgresql://ann@db/books",
        "GPUOPS_PROVIDERS_RUNPOD_URL": "http://127.0.0.1:40001",  # the demo stopped: whose port is unknown
    }
    assert unset_lines(paths, shell) == ["unset GPUOPS_DATA_DIR RUNPOD_API_KEY"]
    assert unset_lines(paths, {"VAST_API_KEY": "vast_mine"}) == []
