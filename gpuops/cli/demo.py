"""``gpuops demo start | stop | status | env``: try gpuops without an account (gpuops.demo)."""

from __future__ import annotations

import typer

from gpuops.cli.group import Group
from gpuops.cli.options import number
from gpuops.demo.demo import TTL_MINUTES

demo_app = typer.Typer(
    cls=Group,
    help="Try gpuops without an account: emulated RunPod and Vast.ai on 127.0.0.1, boxes on this machine (SIMULATED).",
    no_args_is_help=True,
)


def _paths():
    from gpuops.demo.demo import DemoPaths, demo_home

    return DemoPaths(demo_home())


@demo_app.command("start")
def start(
    minutes: float = number(
        TTL_MINUTES, "--minutes", help="End the demo by itself after this many minutes.", example="60"
    ),
) -> None:
    """Start the emulated providers and the box (or say how the running demo is reached)."""
    from gpuops.demo import demo
    from gpuops.render.demo import demo_lines

    paths = _paths()
    state, started = demo.start(paths, minutes)
    print("\n".join(demo_lines(state, paths.home, started)))


@demo_app.command("stop")
def stop() -> None:
    """End the demo: its emulators, its sshd and whatever ran on its box. Its data is kept."""
    from gpuops.demo import demo

    paths = _paths()
    ended = demo.stop(paths)
    print(
        f"SIMULATED: gpuops demo {'ended' if ended else 'was not running'}; its data stays in {paths.home} "
        f'(rm -r it to forget it); eval "$(gpuops demo env --unset)" points this shell back at your own gpuops'
    )


@demo_app.command("status")
def status() -> None:
    """Say whether the demo runs, where, and until when (exit 1 when it does not run)."""
    from gpuops.demo import demo
    from gpuops.render.demo import demo_lines

    paths = _paths()
    state = demo.read_state(paths)
    if state is None:
        print(f"SIMULATED: gpuops demo is not running (its folder: {paths.home}); start it: gpuops demo start")
        raise typer.Exit(1)
    print("\n".join(demo_lines(state, paths.home, False)))


@demo_app.command("env")
def env(
    unset: bool = typer.Option(
        False, "--unset", help="Print the lines that give the shell back what it had before demo env."
    ),
) -> None:
    """Print the export lines that point a shell at the demo: eval "$(gpuops demo env)"."""
    from gpuops.demo import demo
    from gpuops.errors import GpuopsError

    paths = _paths()
    if unset:
        lines = demo.unset_lines(paths)
        if lines:
            print("\n".join(lines))
        return
    state = demo.read_state(paths)
    if state is None:
        raise GpuopsError("gpuops demo is not running", "start it: gpuops demo start")
    print("\n".join(demo.export_lines(paths, state)))
