"""A throwaway PostgreSQL server on loopback for the shared-storage tests (skipped only when PostgreSQL
is not installed; .ci/run installs it). The superuser ``postgres`` connects without a password; members
of ``password_required`` must give theirs (``postgres_password_url``)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

PASSWORD_GROUP = "password_required"


def _pg_bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_server():
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (initdb not found); .ci/run installs it with apt-get install postgresql")
    base = Path(tempfile.mkdtemp(prefix="agentcollapse-pg-"))  # not pytest's tmp: the server's user must reach it
    run_as: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the postgres user the package made
        import pwd

        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user to run the server as")
        os.chown(base, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, port = base / "data", _free_port()
    subprocess.run(
        [*run_as, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-N"], check=True, capture_output=True
    )
    hba = data / "pg_hba.conf"  # first match wins: password roles before initdb's "trust" for everyone
    hba.write_text(f"host all +{PASSWORD_GROUP} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    subprocess.run(
        [
            *run_as,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(base / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-h 127.0.0.1 -p {port} -k {base}",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {PASSWORD_GROUP} NOLOGIN")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture()
def postgres_url(postgres_server, request):
    """A fresh database on the throwaway server for one test."""
    import re

    import psycopg

    name = "t_" + re.sub(r"[^a-z0-9]", "_", request.node.name.lower())[:50]
    with psycopg.connect(f"{postgres_server.replace('+psycopg', '')}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{postgres_server}/{name}"


@pytest.fixture()
def postgres_password_url(postgres_server, postgres_url):
    """``postgres_url``'s database owned by a new role that must give its password, and the URL with
    that password in it (``postgresql+psycopg://<role>:<password>@127.0.0.1:<port>/<db>``)."""
    import secrets

    import psycopg

    role, password = f"sweeper_{secrets.token_hex(4)}", f"pw-{secrets.token_hex(12)}"
    database = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(f"{postgres_server.replace('+psycopg', '')}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}' IN ROLE {PASSWORD_GROUP}")
        conn.execute(f'ALTER DATABASE "{database}" OWNER TO {role}')
    return f"postgresql+psycopg://{role}:{password}@{postgres_server.split('@', 1)[1]}/{database}"
