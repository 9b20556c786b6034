"""The base of every settings table: ``Section`` and ``check``.

On the ground floor, importing nothing of gpuops, so that a provider's settings model
(``gpuops/providers/<name>/settings.py``) derives from the same base as ``gpuops.config``'s own
tables without importing ``config``: ``config`` builds ``[providers]`` from the registry's entries
(docs/adding-a-provider.md).
"""

from __future__ import annotations

import msgspec


def check(*fields: str, before: bool = False):
    """Mark a section's classmethod as the check of ``fields`` (``gpuops.config`` runs it).

    ``before``: it sees the value as given (file, variable or flag, before its type is checked),
    else the typed value. It returns the value to keep or raises ValueError with the one-line problem.
    """

    def mark(method):
        method.__func__._settings_check = (fields, before)
        return method

    return mark


class Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A settings table: typed fields with defaults; an unknown key is an error.

    ``gpuops.config.load_settings`` also refuses an infinite or NaN number (an infinite max_hours
    would switch the TTL off).
    """
