"""A job that checkpoints and resumes: what `gpuops up --spot --recover N` needs of a job.

It runs STEPS steps of STEP_SECONDS each (a sha256 chain stands in for training: the final state
is the same however many times the job was stopped and resumed) and after every step writes its
checkpoint to $GPUOPS_RESUME_DIR/checkpoint.json atomically (a temp file, then rename: a copy
taken at any moment is a whole checkpoint). On start it resumes from that checkpoint when one is
there. The result goes to out/result.json (``[job] results``, copied home at the end).

gpuops sets GPUOPS_RESUME_DIR and GPUOPS_ATTEMPT (1, 2, ...) for a run's rentals: with a volume it
is a directory on the volume; without one it is the results directory, copied home during the job
every ``[job] checkpoint_sync_seconds`` and put on the next rental's box before its job starts.
Outside a run (plain `up`) the job starts from step 0 and keeps its checkpoint in out/.

Knobs (environment): STEPS (default 30), STEP_SECONDS (default 1.0).
"""

import hashlib
import json
import os
import time

steps = int(os.environ.get("STEPS", "30"))
step_s = float(os.environ.get("STEP_SECONDS", "1.0"))
attempt = int(os.environ.get("GPUOPS_ATTEMPT", "1"))
resume_dir = os.environ.get("GPUOPS_RESUME_DIR") or "out"
os.makedirs(resume_dir, exist_ok=True)
os.makedirs("out", exist_ok=True)
ckpt = os.path.join(resume_dir, "checkpoint.json")

state = {"step": 0, "digest": hashlib.sha256(b"gpuops").hexdigest(), "attempts": []}
if os.path.exists(ckpt):
    with open(ckpt) as f:
        state = json.load(f)
    print(f"resumed at step {state['step']} (attempt {attempt})", flush=True)
state["attempts"] = state["attempts"] + [attempt]


def save(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: a reader sees the old checkpoint or the new one, never half of one


while state["step"] < steps:
    time.sleep(step_s)  # the work of one step
    state["step"] += 1
    state["digest"] = hashlib.sha256(f"{state['digest']}:{state['step']}".encode()).hexdigest()
    save(ckpt, state)
    metrics = os.environ.get("GPUOPS_METRICS")
    if metrics:
        with open(metrics, "a") as f:
            f.write(json.dumps({"tokens": 1000}) + "\n")
    print(f"checkpoint {state['step']}", flush=True)

save(
    os.path.join("out", "result.json"),
    {"steps": state["step"], "digest": state["digest"], "attempts": state["attempts"]},
)
print(f"done: {state['step']} steps, digest {state['digest'][:12]}", flush=True)
