"""--model resolution: built-in, config.json path, directory (+ safetensors index), HF repo id."""

from __future__ import annotations

import json

import pytest

from gpuops.errors import BadInput
from gpuops.planning import models, sizing as P
from gpuops.planning.architecture import architecture
from gpuops.planning.models import load_model

CFG = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "intermediate_size": 5632,
    "vocab_size": 32000,
    "torch_dtype": "bfloat16",
}


def test_builtin_case_insensitive_and_alias():
    assert load_model("TinyLlama-1.1B").name == "tinyllama-1.1b"
    assert load_model("TinyLlama/TinyLlama-1.1B-Chat-v1.0").name == "tinyllama-1.1b"


def test_config_file_and_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CFG))
    for arg in (str(tmp_path / "config.json"), str(tmp_path)):
        m = load_model(arg)
        assert architecture(m.config).params == 1_100_048_384 and m.weights_total_size is None


def test_index_beside_a_config_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CFG))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 2_200_119_296}}))
    m = load_model(str(tmp_path / "config.json"))
    assert m.weights_total_size == 2_200_119_296 and m.stored_dtype == "bf16"


@pytest.mark.parametrize(
    "write,match",
    [
        (lambda d: (d / "config.json").write_text("{not json"), "not valid JSON"),
        (lambda d: (d / "config.json").write_text("[1, 2]"), "not a JSON object"),
        (lambda d: None, "has no config.json"),
    ],
)
def test_bad_files(tmp_path, write, match):
    write(tmp_path)
    with pytest.raises(BadInput, match=match):
        load_model(str(tmp_path))


def test_index_without_total_size_falls_back_to_the_shapes(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CFG))
    (tmp_path / "model.safetensors.index.json").write_text('{"metadata": {}, "weight_map": {}}')
    m = load_model(str(tmp_path))
    assert m.weights_total_size is None
    p = P.plan(m, card="t4")
    assert p.weights_bytes == 2 * 1_100_048_384 and p.weights_source.startswith("shapes")


def test_missing_path_and_unknown_name():
    with pytest.raises(BadInput, match="not found"):
        load_model("./nope/config.json")
    with pytest.raises(BadInput, match="did you mean llama-3-8b"):
        load_model("llama-3-8c")
    with pytest.raises(BadInput, match="--model is empty"):
        load_model(" ")


class FakeHub:
    """Stands in for hf_hub_download: serves files from a dict, or raises a given error."""

    def __init__(self, tmp_path, files=None, error=None):
        self.tmp_path, self.files, self.error, self.calls = tmp_path, files or {}, error, []

    def __call__(self, repo_id, filename):
        self.calls.append((repo_id, filename))
        if self.error is not None:
            raise self.error
        if filename not in self.files:
            import huggingface_hub.errors as e

            raise e.EntryNotFoundError(f"{filename} not in {repo_id}")
        path = self.tmp_path / filename
        path.write_text(json.dumps(self.files[filename]))
        return str(path)


def test_hf_repo_config_and_index(tmp_path, monkeypatch):
    hub = FakeHub(
        tmp_path, {"config.json": CFG, "model.safetensors.index.json": {"metadata": {"total_size": 2_200_119_296}}}
    )
    monkeypatch.setattr(models, "_hf_download", hub)
    monkeypatch.setattr(models, "_hf_safetensors_counts", lambda repo_id: None)  # headers: tests/plan/test_hub.py
    m = load_model("someorg/tiny-model")
    assert m.name == "someorg/tiny-model" and m.weights_total_size == 2_200_119_296
    assert hub.calls == [("someorg/tiny-model", "config.json"), ("someorg/tiny-model", "model.safetensors.index.json")]


def test_hf_repo_without_index_falls_back_to_shapes(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "_hf_download", FakeHub(tmp_path, {"config.json": CFG}))
    monkeypatch.setattr(models, "_hf_safetensors_counts", lambda repo_id: None)
    assert load_model("someorg/tiny-model").weights_total_size is None


def _err(name, msg):
    import huggingface_hub.errors as e

    cls = getattr(e, name)
    try:
        return cls(msg)
    except TypeError:  # HTTP errors want the response they came with
        from types import SimpleNamespace

        return cls(msg, response=SimpleNamespace(headers={}, request=None, status_code=403))


@pytest.mark.parametrize(
    "err,match",
    [
        ("GatedRepoError", "is gated"),
        ("RepositoryNotFoundError", "not found"),
        ("LocalEntryNotFoundError", "offline"),
    ],
)
def test_hf_errors_say_pass_a_local_config(tmp_path, monkeypatch, err, match):
    monkeypatch.setattr(models, "_hf_download", FakeHub(tmp_path, error=_err(err, "boom")))
    with pytest.raises(BadInput, match=match) as e:
        load_model("meta-llama/Some-Gated-Model")
    assert "config.json" in str(e.value)
