"""Settings read back without pydantic, for the read-only commands on the start-up hot path.

`gpuops ps`, `gpuops watchdog --once` and the `ledger` reports read a few settings; validating
infra.toml and the GPUOPS_* variables with pydantic and pydantic-settings (gpuops/config.py) costs
~0.1 s of imports, more than the command itself. So after a clean full load (no warning, no
error, no flags) the result is kept in ``<data dir>/settings-snapshot.json`` (0600), keyed by
everything that load read: the config file's path and bytes, every ``GPUOPS_*`` variable, and the
source of gpuops/config.py, pydantic and pydantic-settings. A later load with the same key reads
it back: the same values, by construction. Anything else (another file or variable, a warning, a
snapshot missing, stale or unreadable) runs the full validation, whose values and errors are the
only ones; so the first command after editing infra.toml pays the full load once.

The snapshot holds no text from the file or the environment: a setting whose value is the text
given there (an API key, a ledger URL with a password) is stored as where to read it, and read
there again; defaults, numbers and booleans are stored as values; a load in which a validator
rewrote a text (``name = " alice "``) is not kept. Only the sections the read-only commands use
are kept (``SNAPSHOT_SECTIONS``); reading any other attribute (``bootstrap``, ``job``,
``model_dump``) runs the full load then, once.

This module imports neither pydantic nor gpuops.config (that is its point); ``find_config`` and the
path/owner rules of ``Settings`` live here so both read them from one place.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Callable

from gpuops.errors import BadInput

ENV_PREFIX = "GPUOPS_"
SNAPSHOT_FILE = "settings-snapshot.json"
SNAPSHOT_FORMAT = 1
SNAPSHOT_ENTRIES = 8  # distinct config/variable combinations kept per data dir (newest first)
# A snapshot of SNAPSHOT_ENTRIES entries is a few KB; a larger file is not ours and is not read.
SNAPSHOT_MAX_BYTES = 1 << 20
# The sections the read-only commands read (ps, watchdog --once, ledger reports, reconcile).
SNAPSHOT_SECTIONS = ("user", "up", "teardown", "ledger", "providers", "storage")
NESTED_SECTIONS = {"providers": ("local", "runpod", "vast")}


# -- shared with gpuops.config.Settings -------------------------------------------------------------

def find_config(explicit: str | None) -> Path | None:
    """The config file to read, or None. An explicit path that does not exist is BadInput."""
    if explicit:
        p = Path(explicit).expanduser()
        if p.is_dir():
            raise BadInput(f"config file {explicit} is a directory", f"pass the file itself, e.g. --config {p / 'infra.toml'}")
        if not p.is_file():
            raise BadInput(f"config file {explicit} not found", "pass an existing file to --config")
        return p
    here = Path("infra.toml")
    if here.is_file():
        return here
    import platformdirs

    user = Path(platformdirs.user_config_dir("gpuops", appauthor=False)) / "infra.toml"
    return user if user.is_file() else None


def data_path_of(data_dir: str) -> Path:
    """The data directory a ``data_dir`` setting names (absolute; empty: platformdirs' user data dir)."""
    if data_dir:
        return Path(data_dir).expanduser().absolute()  # rows store log paths: never cwd-relative
    import platformdirs

    return Path(platformdirs.user_data_dir("gpuops", appauthor=False))


def make_private(p: Path) -> Path:
    """``p`` created if missing and made 0700 (the ledger, logs, results, boxes and keys are the user's alone)."""
    p.mkdir(parents=True, exist_ok=True)
    os.chmod(p, 0o700)
    return p


def ledger_url_of(url: str, data_path: Path) -> str:
    """``[ledger] url``, else the SQLite file in the data directory."""
    return url or f"sqlite:///{data_path / 'ledger.db'}"


def owner_of(name: str) -> str:
    """This user's name on the ledger: ``[user] name``, else ``<login>@<hostname>``."""
    from gpuops.ownership import default_owner

    return name or default_owner()


# -- the snapshot ---------------------------------------------------------------------------------

class SnapshotSection:
    """One settings section read back: its settings as attributes, read-only."""

    __slots__ = ("_name", "_values")

    def __init__(self, name: str, values: dict):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_values", values)

    def __getattr__(self, attr: str) -> Any:
        try:
            return self._values[attr]
        except KeyError:
            raise AttributeError(f"settings section {self._name} has no setting {attr!r}") from None

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError("settings read back from the snapshot are read-only")

    def model_dump(self) -> dict:
        return {k: v.model_dump() if isinstance(v, SnapshotSection) else v for k, v in self._values.items()}

    def __repr__(self) -> str:
        return f"SnapshotSection({self._name}, {self.model_dump()!r})"


class SettingsSnapshot:
    """A clean load's ``Settings`` read back: ``data_dir``, ``source``, the ``SNAPSHOT_SECTIONS`` and
    the methods of ``Settings``; any other attribute comes from ``full()``, the full validation."""

    def __init__(self, values: dict, source: str | None, full: Callable[[], Any]):
        self.data_dir: str = values["data_dir"]
        self.source = source
        self._sections = {name: _section(name, values[name]) for name in SNAPSHOT_SECTIONS}
        self._full_load = full
        self._full: Any = None

    def __getattr__(self, name: str) -> Any:
        sections = self.__dict__.get("_sections")
        if sections is not None and name in sections:
            return sections[name]
        if name.startswith("__") or sections is None:
            raise AttributeError(name)
        return getattr(self.full(), name)

    def full(self):
        """The ``gpuops.config.Settings`` of the full validation (run once, on first need)."""
        if self._full is None:
            self._full = self._full_load()
        return self._full

    def data_path(self) -> Path:
        return data_path_of(self.data_dir)

    def private_data_path(self) -> Path:
        return make_private(self.data_path())

    def ledger_url(self) -> str:
        return ledger_url_of(self._sections["ledger"].url, self.data_path())

    def owner(self) -> str:
        return owner_of(self._sections["user"].name)


def _section(name: str, values: dict) -> SnapshotSection:
    nested = NESTED_SECTIONS.get(name, ())
    return SnapshotSection(name, {k: _section(f"{name}.{k}", v) if k in nested else v for k, v in values.items()})


def load(config: str | None, lenient: bool = False, env: dict | None = None):
    """``gpuops.config.load_settings(config, lenient=lenient, env=env)`` (no flags; ``env``
    default ``os.environ``), from the snapshot when the same inputs loaded cleanly before: a
    ``SettingsSnapshot``, else the full load's ``Settings`` (written to the snapshot when it was
    clean). Raises what ``load_settings`` raises."""
    path = find_config(config)
    full_env = os.environ if env is None else env
    env = {k: v for k, v in full_env.items() if k.upper().startswith(ENV_PREFIX)}
    try:
        text = path.read_bytes() if path is not None else None
    except OSError:
        text = None
    # Two spellings of one variable (gpuops_x and GPUOPS_X): the later one in the environment wins,
    # an order the key does not hold, so such a load is never kept.
    ambiguous = len({k.upper() for k in env}) != len(env)
    key = _key(path, text, env) if (path is None or text is not None) and not ambiguous else None
    toml: list = []  # the parsed file, once
    home = _data_dir_guess(env, text, toml) if key is not None else None
    if home is not None:
        values = _read(home / SNAPSHOT_FILE, key, env, text, toml)
        if values is not None:
            try:
                return SettingsSnapshot(values, str(path) if path else None, lambda: _full_load(config, lenient, None, full_env))
            except (KeyError, TypeError, AttributeError):  # an entry not of this shape: the full load
                pass
    problems: list[str] = []
    settings = _full_load(config, lenient, problems, full_env)
    # The full load found the config file again: kept only when it read the file the key names.
    if (key is not None and not problems and home is not None and home == settings.data_path()
            and settings.source == (str(path) if path is not None else None)):
        try:
            fresh = path.read_bytes() if path is not None else None
        except OSError:
            fresh = b"\0changed"
        if fresh == text:
            _write(home, key, settings, env, text, toml)
    return settings


def _full_load(config: str | None, lenient: bool, problems: list | None, env):
    from gpuops.config import _warn_stderr, load_settings

    def warn(line: str) -> None:
        if problems is not None:
            problems.append(line)
        _warn_stderr(line)

    return load_settings(config, lenient=lenient, env=dict(env), warn=warn)


def _key(path: Path | None, text: bytes | None, env: dict) -> str | None:
    """sha512 over what a load reads: the file, the variables, the code that validates (None:
    that code cannot be read, so nothing is kept)."""
    h = _sha512()
    h.update(f"format {SNAPSHOT_FORMAT}\n".encode())
    here = Path(__file__).resolve().parent
    for code in (here / "config.py", here / "settings_snapshot.py"):
        try:
            h.update(code.read_bytes())
        except OSError:  # not plain files (a zip): no snapshot, every load in full
            return None
    import importlib.util

    for pkg in ("pydantic", "pydantic_settings", "pydantic_core"):
        spec = importlib.util.find_spec(pkg)
        for where in (spec.submodule_search_locations or []) if spec is not None else []:
            for name in ("version.py", "__init__.py"):
                try:
                    st = os.stat(os.path.join(where, name))
                except OSError:
                    continue
                h.update(f"{pkg} {where} {name} {st.st_size} {st.st_mtime_ns}\n".encode())
    h.update(json.dumps([os.path.abspath(path) if path is not None else None, sorted(env.items())]).encode())
    h.update(b"\0" + (text or b""))
    return h.hexdigest()


def _sha512():
    """A sha512 hash object. As the stdlib's random.py does, CPython's lean built-in module first:
    hashlib loads OpenSSL's binding (~3 ms, more than reading the snapshot)."""
    try:
        from _sha2 import sha512  # CPython >= 3.12
    except ImportError:
        try:
            from _sha512 import sha512  # CPython <= 3.11
        except ImportError:  # pragma: no cover
            from hashlib import sha512
    return sha512()


def _parsed(text: bytes | None, toml: list) -> dict | None:
    if text is None:
        return {}
    if not toml:
        try:
            import tomllib
        except ImportError:  # pragma: no cover  (python 3.10, as gpuops.config)
            import tomli as tomllib

        try:
            toml.append(tomllib.loads(text.decode("utf-8")))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            toml.append(None)
    return toml[0]


def _env_value(env: dict, var: str) -> tuple[str, str] | None:
    """(name as set, value) of the variable pydantic-settings reads as ``var`` (names are not
    case-sensitive there); None when unset or set twice in different cases."""
    hits = [(k, v) for k, v in env.items() if k.upper() == var]
    return hits[0] if len(hits) == 1 else None


def _data_dir_guess(env: dict, text: bytes | None, toml: list) -> Path | None:
    """The data dir the inputs name (variable > file > default), without validating them."""
    hit = _env_value(env, ENV_PREFIX + "DATA_DIR")
    if hit is not None:
        return data_path_of(hit[1])
    data = _parsed(text, toml)
    if data is None:
        return None
    value = data.get("data_dir", "")
    return data_path_of(value) if isinstance(value, str) else None


def _read(file: Path, key: str, env: dict, text: bytes | None, toml: list) -> dict | None:
    """The values of the snapshot entry ``key`` with every reference resolved, or None."""
    try:
        doc = json.loads(_snapshot_bytes(file))
        entry = next(e for e in doc["entries"] if e["key"] == key)
        return {name: _resolve(v, env, text, toml) for name, v in entry["values"].items()}
    except (OSError, ValueError, KeyError, TypeError, StopIteration, LookupError):
        return None


def _snapshot_bytes(file: Path) -> bytes:
    """The bytes of the snapshot ``file``. Raises OSError unless it is a regular file of at most
    ``SNAPSHOT_MAX_BYTES``: a FIFO or a device there (``/dev/zero``) would block or never end, and
    `ps` and `watchdog --once` must answer whatever lies in the data dir."""
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # opening a FIFO does not wait for a writer
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > SNAPSHOT_MAX_BYTES:
            raise OSError(f"{file}: not a snapshot file")
        return f.read(SNAPSHOT_MAX_BYTES + 1)


class _Unresolved(LookupError):
    pass


def _resolve(v: Any, env: dict, text: bytes | None, toml: list) -> Any:
    if isinstance(v, dict) and "$env" in v:
        value = env.get(v["$env"])
        if not isinstance(value, str):
            raise _Unresolved(v["$env"])
        return value
    if isinstance(v, dict) and "$file" in v:
        node: Any = _parsed(text, toml)
        for k in v["$file"]:
            node = node.get(k) if isinstance(node, dict) else None
        if not isinstance(node, str):
            raise _Unresolved(".".join(v["$file"]))
        return node
    if isinstance(v, dict):
        return {k: _resolve(x, env, text, toml) for k, x in v.items()}
    return v


def _entry_values(settings, env: dict, text: bytes | None, toml: list) -> dict | None:
    """What the snapshot stores of ``settings`` (see the module doc), or None when it cannot be kept."""
    from gpuops.config import Settings

    defaults = Settings().model_dump()
    dumped = settings.model_dump()
    data = _parsed(text, toml)
    if data is None:
        return None

    def leaf(path: tuple, value: Any) -> Any:
        hit = _env_value(env, ENV_PREFIX + "_".join(path).upper())
        if hit is not None:
            raw: Any = hit[1]
            ref: Any = {"$env": hit[0]}
        else:
            raw = data
            for k in path:
                raw = raw.get(k, _MISSING) if isinstance(raw, dict) else _MISSING
            ref = {"$file": list(path)}
            if raw is _MISSING:  # the default
                d: Any = defaults
                for k in path:
                    d = d[k]
                if d != value or type(d) is not type(value):
                    raise _Unresolved(".".join(path))
                return value
        if isinstance(value, str):
            if type(raw) is str and raw == value:
                return ref
            raise _Unresolved(".".join(path))  # a text a validator rewrote (or a default-equal text)
        if value is None or isinstance(value, (bool, int, float)):
            if hit is None and raw != value:  # not what the keyed file says: another file was loaded
                raise _Unresolved(".".join(path))
            return value
        raise _Unresolved(".".join(path))

    def walk(path: tuple, value: Any) -> Any:
        if isinstance(value, dict) and (path[0] in SNAPSHOT_SECTIONS and (len(path) == 1 or path[-1] in NESTED_SECTIONS.get(path[0], ()))):
            return {k: walk(path + (k,), v) for k, v in value.items()}
        return leaf(path, value)

    try:
        out = {"data_dir": leaf(("data_dir",), dumped["data_dir"])}
        out.update({name: walk((name,), dumped[name]) for name in SNAPSHOT_SECTIONS})
    except _Unresolved:
        return None
    return out


_MISSING = object()


def _write(home: Path, key: str, settings, env: dict, text: bytes | None, toml: list) -> None:
    """Add the entry ``key`` to ``home``'s snapshot (newest first, at most SNAPSHOT_ENTRIES); a
    failure to write only costs the next command the full load."""
    values = _entry_values(settings, env, text, toml)
    if values is None:
        return
    file = home / SNAPSHOT_FILE
    try:
        make_private(home)
        try:
            entries = [e for e in json.loads(_snapshot_bytes(file))["entries"] if isinstance(e, dict) and e.get("key") != key]
        except (OSError, ValueError, KeyError, TypeError):
            entries = []
        doc = {"format": SNAPSHOT_FORMAT, "entries": [{"key": key, "values": values}] + entries[:SNAPSHOT_ENTRIES - 1]}
        tmp = home / f".{SNAPSHOT_FILE}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, file)
    except OSError:
        try:
            os.unlink(home / f".{SNAPSHOT_FILE}.{os.getpid()}")
        except OSError:
            pass
