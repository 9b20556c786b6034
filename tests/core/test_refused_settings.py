"""Bad input a new user gave through a setting or a flag value (found by hand, 2026-12-01): one line
naming the fix, exit 2, before anything is rented or booked."""

from __future__ import annotations

import pytest


@pytest.fixture
def job(tmp_path):
    p = tmp_path / "ok.sh"
    p.write_text("true\n")
    return str(p)


def _nothing_rented(home) -> None:
    assert not (home / "ledger.db").exists() and not (home / "boxes").exists()


CARD_EMPTY = (
    "card is empty: name one, e.g. a100 (`gpuops cards` lists them), or leave it unset for the cheapest card that fits"
)


@pytest.mark.parametrize("value", ['""', '"  "'])
def test_an_empty_card_in_the_file_is_refused_not_read_as_any_card(value, job, gpuops_home, cli, tmp_path):
    # Seen: `[up] card = ""` rented the cheapest card that fits, as if card were left out.
    cfg = tmp_path / "conf" / "infra.toml"
    cfg.parent.mkdir()
    cfg.write_text(f"[up]\ncard = {value}\n")
    out = cli("up", "--job", job, "--config", str(cfg))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == f"error: {cfg}:2: up.card: {CARD_EMPTY} (see infra.example.toml for the keys and units)\n"
    _nothing_rented(gpuops_home)


@pytest.mark.parametrize("command", [["up", "--job", "{job}"], ["offers"]])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_card_variable_is_refused_not_read_as_any_card(command, value, job, gpuops_home, cli):
    # Seen: `GPUOPS_UP_CARD=$CARD gpuops up ...` with CARD unset rented the cheapest card.
    out = cli(*[job if a == "{job}" else a for a in command], env={"GPUOPS_UP_CARD": value})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == f"error: environment variable GPUOPS_UP_CARD: {CARD_EMPTY} (fix or unset the variable)\n"
    _nothing_rented(gpuops_home)


def test_an_empty_card_variable_is_a_warning_for_ps(gpuops_home, cli):
    out = cli("ps", env={"GPUOPS_UP_CARD": ""})
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert out.stderr.startswith(f"warning: environment variable GPUOPS_UP_CARD: {CARD_EMPTY}; ignored"), out.stderr


@pytest.mark.e2e  # local offers start the containment probe (a onbox/contain.py process)
def test_the_example_config_leaves_card_unset(gpuops_home, cli, job):
    from tests.conftest import REPO

    out = cli("up", "--job", job, "--dry-run", "--config", str(REPO / "infra.example.toml"))
    assert out.returncode == 0, (out.stdout, out.stderr)


IDLE_FIX = "(e.g. --idle-minutes 15, or --idle-minutes off to switch the idle layer off)"


@pytest.mark.parametrize(
    "value,problem",
    [
        ("-3", "--idle-minutes must be > 0 minutes, got -3"),  # was "0 is ambiguous"
        ("0", "--idle-minutes 0 is ambiguous: an idle window needs minutes > 0"),
        ("nan", "--idle-minutes must be a finite number of minutes, got 'nan'"),
        ("abc", "--idle-minutes must be a number of minutes or off, got 'abc'"),
        ("", "--idle-minutes must be a number of minutes or off, got ''"),
    ],
)
def test_a_bad_idle_window_flag_says_what_is_wrong_with_an_example(value, problem, job, gpuops_home, cli):
    out = cli("up", "--job", job, "--idle-minutes", value)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == f"error: {problem} {IDLE_FIX}\n"
    _nothing_rented(gpuops_home)


def test_a_negative_idle_window_variable_is_not_called_ambiguous(job, gpuops_home, cli):
    out = cli("up", "--job", job, env={"GPUOPS_TEARDOWN_IDLE_MINUTES": "-3"})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (
        "error: environment variable GPUOPS_TEARDOWN_IDLE_MINUTES: idle_minutes must be > 0 minutes, got -3: "
        'e.g. 15, or "off" to disable the idle layer (fix or unset the variable)\n'
    )


@pytest.mark.e2e  # local offers start the containment probe (a onbox/contain.py process)
def test_an_idle_window_flag_of_minutes_or_off_is_taken(job, gpuops_home, cli):
    import json

    for value, want in (("1.5", 1.5), (" Off ", "off")):
        out = cli("up", "--job", job, "--idle-minutes", value, "--dry-run", "--json")
        assert out.returncode == 0, (out.stdout, out.stderr)
        assert json.loads(out.stdout)["teardown"]["idle_minutes"] == want


@pytest.mark.parametrize("command", [["up", "--job", "{job}"], ["offers"]])
@pytest.mark.parametrize("value", ["-5", "0"])
def test_a_price_cap_at_or_under_zero_names_a_valid_one(command, value, job, gpuops_home, cli):
    # Seen: "command line: up.max_price: Input should be greater than 0 (see `gpuops up --help`)": no example.
    out = cli(*[job if a == "{job}" else a for a in command], "--max-price", value)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == f"error: --max-price must be > 0 USD per hour, got {value} (e.g. --max-price 2.5)\n"
    _nothing_rented(gpuops_home)


@pytest.mark.parametrize(
    "args,flag",
    [
        (["up", "--job", ""], "--job"),  # was "job . is a directory"
        (["up", "--job", "{job}", "--name", ""], "--name"),  # was a generated session id
        (["up", "--job", "{job}", "--model", " "], "--model"),  # was no model
        (["up", "--job", "{job}", "--vendor", ""], "--vendor"),  # was nvidia
        (["up", "--job", "{job}", "--model", "llama-3-8b", "--dtype", ""], "--dtype"),  # was auto
        (["plan", "--model", "llama-3-8b", "--kv-dtype", ""], "--kv-dtype"),
        (["plan", "--model", "llama-3-8b", "--engine", ""], "--engine"),  # was vllm
        (["plan", "--model", "llama-3-8b", "--vendor", ""], "--vendor"),
        (["offers", "--model", ""], "--model"),
    ],
)
def test_a_blank_flag_is_refused_not_read_as_left_out(args, flag, job, gpuops_home, cli):
    # Seen: `--name "$NAME"` (and --model, --vendor, --dtype, --kv-dtype, --engine) with the variable
    # unset ran as if the flag were left out; `--job ""` said "job . is a directory".
    out = cli(*[job if a == "{job}" else a for a in args])
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag} is empty (pass "), out.stderr
    _nothing_rented(gpuops_home)


@pytest.mark.parametrize(
    "args,what",
    [
        (["ledger", "month", ""], "the month"),  # was this month
        (["ledger", "month", "--tz", ""], "--tz"),  # was this machine's zone
        (["ledger", "experiments", "--since", " "], "--since"),  # was from the first session
        (["ledger", "experiments", "--until", ""], "--until"),
        (["ledger", "sessions", "--since", ""], "--since"),
        (["ledger", "export", "--month", ""], "--month"),  # was everything
        (["ledger", "import", ""], "the file name"),  # was ". is not a file"; "the file is empty" words an empty CSV
        (["ledger", "sync", "--month", ""], "--month"),
        (["dashboard", "--month", "", "--html", "page.html"], "--month"),
    ],
)
def test_a_blank_ledger_flag_is_refused_not_read_as_left_out(args, what, cli):
    out = cli(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {what} is empty (pass "), out.stderr


def test_a_month_in_full_width_digits_is_refused_as_not_yyyy_mm(cli):
    # Seen: "month ２０２６-１１ is outside the months the books can count" (int() reads full-width digits).
    out = cli("ledger", "month", "２０２６-１１")
    assert out.returncode == 2
    assert out.stderr == (
        "error: month must look like 2026-11, got '２０２６-１１' (pass the month as YYYY-MM, e.g. 2026-11)\n"
    )


@pytest.mark.parametrize("command", [["up", "--job", "{job}"], ["ps"], ["ledger", "month"]])
def test_a_blank_config_flag_is_refused_not_read_as_the_default_file(command, job, gpuops_home, cli, tmp_path):
    # Seen: `--config "$CFG"` with CFG unset read ./infra.toml (or the user's) instead.
    (tmp_path / "infra.toml").write_text('[up]\ncard = "h100"\n')  # what a left-out --config would read
    out = cli(*[job if a == "{job}" else a for a in command], "--config", "")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (
        "error: --config is empty (pass the path of an infra.toml, e.g. --config infra.toml, or leave --config out)\n"
    )
    _nothing_rented(gpuops_home)


@pytest.mark.parametrize("var", ["GPUOPS_TEARDOWN", "GPUOPS_UP"])
def test_a_whole_table_variable_that_is_not_a_table_is_refused_by_up(var, job, gpuops_home, cli):
    # Seen: `GPUOPS_TEARDOWN='not json' gpuops up ...` ran with the default TTL: up's empty table of
    # flags replaced the variable's value before it was checked (`gpuops plan`/`ps` saw it).
    out = cli("up", "--job", job, env={var: "not json"})
    assert out.returncode == 2, (out.stdout, out.stderr)
    section = {"GPUOPS_TEARDOWN": "TeardownSettings", "GPUOPS_UP": "UpSettings"}[var]
    assert out.stderr == (
        f"error: environment variable {var}: Input should be a valid dictionary or instance of {section} "
        "(fix or unset the variable)\n"
    )
    _nothing_rented(gpuops_home)


@pytest.mark.parametrize(
    "value,problem",
    [
        ("x" * 100_000, "--experiment is 100,000 characters long, more than 200"),  # was booked, 4000 report lines
        ("\u200b", "--experiment must be one line of visible text, got '\\u200b'"),  # was booked, an invisible label
    ],
)
@pytest.mark.e2e  # local offers start the containment probe (a onbox/contain.py process)
def test_an_experiment_that_is_no_short_visible_name_is_refused(value, problem, job, gpuops_home, cli):
    out = cli("up", "--job", job, "--experiment", value)
    assert out.returncode == 2, (out.stdout, out.stderr[:300])
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {problem} ("), out.stderr[:300]
    _nothing_rented(gpuops_home)
    assert cli("up", "--job", job, "--experiment", "实验-" + "x" * 196, "--dry-run").returncode == 0


def test_a_card_count_past_one_box_names_the_card_flag(job, gpuops_home, cli):
    # Seen: `up --card a100:99` said "--gpu-count must be <= 16 GPUs in one box": a flag not given.
    out = cli("up", "--job", job, "--card", "a100:99")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (
        "error: --card a100:99 asks for 99 GPUs, more than the 16 of one box (e.g. --card a100:8 (8 GPUs in one box))\n"
    )
    _nothing_rented(gpuops_home)


def test_a_blank_experiment_names_where_it_was_set(job, gpuops_home, cli, tmp_path):
    # Seen: `GPUOPS_UP_EXPERIMENT=` was refused as "--experiment must be one line ...": a flag not given.
    fix = "experiment is empty: name one, e.g. llama-sweep, or leave it unset for default"
    out = cli("up", "--job", job, env={"GPUOPS_UP_EXPERIMENT": ""})
    assert out.stderr == f"error: environment variable GPUOPS_UP_EXPERIMENT: {fix} (fix or unset the variable)\n"
    cfg = tmp_path / "conf" / "infra.toml"
    cfg.parent.mkdir()
    cfg.write_text('[up]\nexperiment = " "\n')
    out = cli("up", "--job", job, "--config", str(cfg))
    assert out.stderr == f"error: {cfg}:2: up.experiment: {fix} (see infra.example.toml for the keys and units)\n"
    out = cli("up", "--job", job, "--experiment", "")
    assert out.stderr == (
        "error: --experiment is empty (pass a name, e.g. --experiment llama-sweep, or leave --experiment out)\n"
    )
    _nothing_rented(gpuops_home)


LEDGER_URL_EMPTY = (
    "url is empty: give one, e.g. postgresql+psycopg://user@host/gpuops, or leave it unset for the local ledger"
)


def test_an_empty_ledger_url_in_the_file_is_refused_not_read_as_the_local_ledger(job, gpuops_home, cli, tmp_path):
    # `url = ""` (the old example config's line) booked into the local SQLite file without a word.
    cfg = tmp_path / "conf" / "infra.toml"
    cfg.parent.mkdir()
    cfg.write_text('[ledger]\nurl = ""\n')
    out = cli("up", "--job", job, "--config", str(cfg))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (
        f"error: {cfg}:2: ledger.url: {LEDGER_URL_EMPTY} (see infra.example.toml for the keys and units)\n"
    )
    _nothing_rented(gpuops_home)


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_ledger_url_variable_is_refused_not_read_as_the_local_ledger(value, job, gpuops_home, cli):
    # Seen: `GPUOPS_LEDGER_URL=$TEAM_DB gpuops up ...` with TEAM_DB unset booked into a private file,
    # where the team's monthly cap never counts the rental.
    out = cli("up", "--job", job, env={"GPUOPS_LEDGER_URL": value})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (
        f"error: environment variable GPUOPS_LEDGER_URL: {LEDGER_URL_EMPTY} (fix or unset the variable)\n"
    )
    _nothing_rented(gpuops_home)


def test_reconcile_destroy_unknown_refuses_a_ledger_url_it_would_skip(gpuops_home, cli):
    # --destroy-unknown destroys every gpuops- box the ledger has no row for: with a blank
    # GPUOPS_LEDGER_URL skipped, the local file would be "the ledger" and a team's boxes all unknown.
    out = cli("reconcile", "--destroy-unknown", env={"GPUOPS_LEDGER_URL": ""})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (
        f"error: environment variable GPUOPS_LEDGER_URL: {LEDGER_URL_EMPTY} (fix or unset the variable)\n"
    )
    out = cli("reconcile", env={"GPUOPS_LEDGER_URL": ""})  # only the ledger's own rows: warned, goes on
    assert out.returncode == 0 and out.stderr.startswith("warning: environment variable GPUOPS_LEDGER_URL: "), out


IMAGE_EMPTY = (
    "image is empty: name one, e.g. runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04, or leave it unset"
)


def test_an_empty_image_variable_is_refused_not_read_as_the_default_image(job, gpuops_home, cli):
    out = cli("up", "--job", job, env={"GPUOPS_UP_IMAGE": ""})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == f"error: environment variable GPUOPS_UP_IMAGE: {IMAGE_EMPTY} (fix or unset the variable)\n"
    _nothing_rented(gpuops_home)


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_an_image_that_is_not_a_docker_reference_is_refused_before_the_intent_row(dry_run, job, gpuops_home, cli):
    # Seen: caught only by the provider's create, after the intent row; `up --dry-run` said nothing.
    out = cli("up", "--job", job, *dry_run, env={"GPUOPS_UP_IMAGE": "bad image;rm -rf ~"})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (
        "error: image 'bad image;rm -rf ~' is not a docker image reference "
        "(use e.g. runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04)\n"
    )
    _nothing_rented(gpuops_home)
