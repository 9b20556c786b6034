"""Run the job detached from the laptop: ``python3 jobwrap.py --dir RUN_DIR -- COMMAND...``.

Started with setsid/nohup (its own session and process group, which the job inherits), so a
dropped SSH connection or a closed laptop does not touch the job. Writes into RUN_DIR:
``job.pid`` (the job's pid), ``heartbeat`` (a counter rewritten every HEARTBEAT_S seconds while
the wrapper lives: a laptop that sees it stop changing knows the wrapper died), ``job.log`` (stdout+stderr, appended), ``exit_code`` (the job's exit
status: 128+N for a signal, written atomically) and then ``exit_marker`` (its presence means the
job has ended and ``exit_code`` is final). Stdlib only, python3 >= 3.8.
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

HEARTBEAT_S = 1.0


def _write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("no command")
    os.makedirs(a.dir, exist_ok=True)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup semantics: a closed terminal is not a stop
    log = open(os.path.join(a.dir, "job.log"), "ab", buffering=0)
    beat_path = os.path.join(a.dir, "heartbeat")

    def beat():
        n = 0
        while True:
            n += 1
            try:
                _write_atomic(beat_path, "%d\n" % n)
            except OSError:
                pass
            time.sleep(HEARTBEAT_S)

    threading.Thread(target=beat, daemon=True).start()
    started = time.time()
    try:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except OSError as e:
        log.write(("gpuops: cannot start job: %s\n" % e).encode())
        code = 127
    else:
        _write_atomic(os.path.join(a.dir, "job.pid"), str(child.pid))

        def forward(signum, _frame):
            try:
                child.send_signal(signum)
            except OSError:
                pass

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        rc = child.wait()
        code = 128 - rc if rc < 0 else rc  # -9 -> 137, as a shell reports it
    _write_atomic(os.path.join(a.dir, "exit_code"), "%d\n%.3f\n%.3f\n" % (code, started, time.time()))
    _write_atomic(os.path.join(a.dir, "exit_marker"), "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
