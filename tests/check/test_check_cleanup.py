"""`check --rent`'s cleanup ends every child and tries every row, whatever one layer raises."""

from pathlib import Path

from gpuops.rental import check_layers
from gpuops.rental.check_layers import CheckRun, Layer


class _Provider:
    def list(self, prefix):
        return []


def test_a_layer_whose_row_cannot_be_closed_does_not_keep_the_others_alive(monkeypatch):
    run = object.__new__(CheckRun)
    run.provider = _Provider()
    run.layers = [Layer(n, "", Path(n), "off", 1.0, Path(n), proc=n) for n in ("job", "idle", "ttl")]
    killed, ended = [], []
    monkeypatch.setattr(check_layers, "_kill", killed.append)

    def end_row(layer):
        if layer.name == "job":
            raise RuntimeError("database is locked")
        ended.append(layer.name)

    monkeypatch.setattr(run, "_end_row", end_row)
    run._cleanup()
    assert killed == ["job", "idle", "ttl"]
    assert ended == ["idle", "ttl"]
    job = run.layers[0].finding
    assert job.verdict.value == "fail" and "database is locked" in job.detail and "reconcile" in job.fix
