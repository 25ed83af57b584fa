"""Where a sweep's study lives, with its database password kept off the disk and out of the output.

The storage is ``hydra.sweeper.storage`` when the sweep names one, else the URL in the environment
variable ``AGENTCOLLAPSE_STORAGE``, else ``sqlite:///<sweep dir>/study.db``. A URL on the command line
or in a sweep file is copied into Hydra's saved configs and the printed resume command, so one that
holds a password is refused: the password belongs in PostgreSQL's own ``PGPASSWORD`` or ``~/.pgpass``
(psycopg reads both; the preferred way), or in ``AGENTCOLLAPSE_STORAGE``'s URL. A trial gets the URL
without its password (``sweep.storage``) and takes the password back from the environment
(:func:`with_password`); every URL that is printed has its password hidden (:func:`hide_password`), and
so has any text that may hold one (:func:`mask_passwords`; ``python -m agentcollapse.sweep.storage --mask
TEXT``, which the Makefile's recipes print their command lines through). This module imports only the
standard library up front (SQLAlchemy in the functions that parse a URL), so that command starts fast.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from agentcollapse.errors import UserError

__all__ = [
    "STORAGE_ENV",
    "hide_password",
    "mask_passwords",
    "open_storage",
    "refuse_password",
    "sweep_storage",
    "with_password",
    "without_password",
]

STORAGE_ENV = "AGENTCOLLAPSE_STORAGE"


def _parse(url: str) -> Any:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except ArgumentError:
        raise UserError(f"{hide_password(url)} is not a database URL (postgresql+psycopg://user@host/db, sqlite:///path)") from None


def _password_keys(parsed: Any) -> list[str]:
    return [k for k in parsed.query if k.lower() == "password"]  # postgresql+psycopg://u@h/db?password=...


def has_password(url: str) -> bool:
    parsed = _parse(url)
    return parsed.password is not None or bool(_password_keys(parsed))


def without_password(url: str) -> str:
    """``url`` with its password left out (what may be written down)."""
    return _strip(_parse(url)).render_as_string(hide_password=False)


def _strip(parsed: Any) -> Any:
    from sqlalchemy.engine import URL

    parsed = parsed.difference_update_query(_password_keys(parsed))
    return URL.create(parsed.drivername, parsed.username, None, parsed.host, parsed.port, parsed.database, parsed.query)


def hide_password(url: str) -> str:
    """``url`` as it may be printed: a password in it shown as ``***`` (one in its query left out)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # not a URL: print none of it, it may hold a password
        return "<storage URL>"
    # masked as text, not by SQLAlchemy: it ends a password at its first raw @ and would print the rest
    return mask_passwords(parsed.difference_update_query(_password_keys(parsed)).render_as_string(hide_password=False))


# scheme://user:password@: the password runs to the last @ before a space or the next URL (a raw @ in it
# is masked whole; SQLAlchemy would cut it at the first)
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)(?:(?!://)\S)+(?=@)")
# password=... (a URL's query, a libpq conninfo, an override, PGPASSWORD=): quoted, or up to a space, &, # or quote
_KEY_PASSWORD = re.compile(r"""(?<![A-Za-z0-9])((?:pg)?password=)(?:'[^']*'|"[^"]*"|[^\s&#'"]+)""", re.IGNORECASE)


def mask_passwords(text: str) -> str:
    """``text`` (a command line, a log line) with every URL's ``user:password@`` shown as ``user:***@``,
    as :func:`hide_password` shows it, and every ``password=...`` as ``password=***``; the rest as it is."""
    return _KEY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***", text))


def refuse_password(url: str, where: str) -> None:
    """A URL that would be saved or printed (``where`` is the setting) must hold no password."""
    if has_password(url):
        raise UserError(
            f"{where}={hide_password(url)} holds a password, which would be saved in every trial's config and printed in "
            f"the resume command; leave it out and give it to PostgreSQL in PGPASSWORD or ~/.pgpass, or give the whole URL "
            f"in the environment variable {STORAGE_ENV} instead of {where}"
        )


def sweep_storage(configured: str | None, sweep_dir: str | Path) -> str:
    """The storage URL of the sweep in ``sweep_dir`` (module docstring); it may hold a password, so it
    is only ever kept in memory."""
    if configured:
        refuse_password(configured, "hydra.sweeper.storage")
        return configured
    from_env = os.environ.get(STORAGE_ENV, "").strip()
    if from_env:
        _parse(from_env)
        return from_env
    return f"sqlite:///{(Path(sweep_dir) / 'study.db').resolve()}"


def with_password(url: str) -> str:
    """``url`` with the password of ``AGENTCOLLAPSE_STORAGE`` when that names the same database and ``url``
    has none (a trial's ``sweep.storage``); else ``url`` as it is (psycopg then reads PGPASSWORD or ~/.pgpass)."""
    from_env = os.environ.get(STORAGE_ENV, "").strip()
    if not from_env or has_password(url):
        return url
    try:
        same = without_password(from_env) == without_password(url)
    except UserError:
        return url
    return from_env if same else url


def open_storage(url: str, heartbeat_s: int | None = None) -> Any:
    """Optuna's storage for ``url`` (its password restored from the environment, see :func:`with_password`);
    ``heartbeat_s`` makes a trial whose worker is silent for 3 beats stale."""
    import optuna

    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 60}  # workers wait for each other's writes
    beats: dict[str, Any] = {"heartbeat_interval": heartbeat_s, "grace_period": 3 * heartbeat_s} if heartbeat_s else {}
    return optuna.storages.RDBStorage(with_password(url), engine_kwargs=kwargs, **beats)


def _main(argv: list[str]) -> int:
    """``python -m agentcollapse.sweep.storage --mask TEXT``: print TEXT through :func:`mask_passwords`."""
    if len(argv) != 2 or argv[0] != "--mask":
        print("usage: python -m agentcollapse.sweep.storage --mask TEXT (prints TEXT with every password as ***)", file=sys.stderr)
        return 2
    print(mask_passwords(argv[1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
