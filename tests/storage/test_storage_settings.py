"""[storage] and the weights settings reach the places that use them."""

from __future__ import annotations

import pytest

from gpuops.agent.bootstrap_config import build_bootstrap_plan, cache_env
from gpuops.config import load_settings
from gpuops.errors import BadInput


def test_volume_from_the_environment_and_the_one_fetch_deadline(gpuops_home, monkeypatch):
    monkeypatch.setenv("GPUOPS_STORAGE_VOLUME", "runpod:weights-eu")
    s = load_settings(None)
    assert (s.storage.volume, s.teardown.fetch_deadline_seconds) == ("runpod:weights-eu", 900.0)
    with pytest.raises(BadInput, match="fetch_deadline_seconds"):
        load_settings(None, {"teardown": {"fetch_deadline_seconds": 0}})
    with pytest.raises(BadInput, match="results_deadline_seconds"):  # one deadline: the [storage] one is gone
        load_settings(None, {"storage": {"results_deadline_seconds": 60}})


def test_weights_step_gets_patterns_the_venv_python_and_the_volume_cache(gpuops_home):
    s = load_settings(
        None,
        {
            "bootstrap": {
                "packages": ["huggingface_hub"],
                "venv": "venv",
                "weights": [{"source": "hf://org/model@" + "a" * 40, "allow_patterns": ["*.safetensors", "*.json"]}],
            }
        },
    )
    plan = build_bootstrap_plan(s, volume_path="/workspace", environ={})
    step = next(x for x in plan.config["steps"] if x["kind"] == "weights")
    assert step["allow_patterns"] == ["*.safetensors", "*.json"] and step["python"] == "venv/bin/python"
    assert plan.config["cache_dir"] == "/workspace/.cache/gpuops"
    assert cache_env(plan.config["cache_dir"]) == {
        "HF_HOME": "/workspace/.cache/gpuops/huggingface",
        "UV_CACHE_DIR": "/workspace/.cache/gpuops/pip/uv",
        "PIP_CACHE_DIR": "/workspace/.cache/gpuops/pip/pip",
    }
    assert cache_env("") == {}
