"""`dashboard --html FILE` into a folder that does not exist: a one-line error, no traceback."""

from __future__ import annotations


def test_html_into_a_missing_folder_is_bad_input(gpuops_home, cli, tmp_path):
    # Seen: `gpuops dashboard --html /nonexist/dir/x.html` -> FileNotFoundError traceback, exit 1.
    target = tmp_path / "no-such-folder" / "costs.html"
    out = cli("dashboard", "--html", str(target))
    assert out.returncode == 2, out.stderr
    assert "cannot write --html" in out.stderr and "existing, writable folder" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not target.parent.exists()
    ok = cli("dashboard", "--html", str(tmp_path / "costs.html"))
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "costs.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert not (tmp_path / "costs.html.tmp").exists()
