"""A sweep's storage URL: from the command line, else AGENTCOLLAPSE_STORAGE, else study.db; a password
is never written down or printed (the end-to-end check: test_sweep_e2e.py)."""

from __future__ import annotations

import pytest

from agentcollapse.errors import UserError
from agentcollapse.sweep.settings import SweepSettings
from agentcollapse.sweep.storage import STORAGE_ENV, hide_password, mask_passwords, sweep_storage, with_password, without_password
from agentcollapse.sweep.workers import run_workers

SECRET = "s3cr3t-pw"
WITH_PASSWORD = f"postgresql+psycopg://sweeper:{SECRET}@db.example:5432/study?sslmode=require"
WITHOUT = "postgresql+psycopg://sweeper@db.example:5432/study?sslmode=require"


def test_a_password_on_the_command_line_is_refused_with_the_way_to_give_it(tmp_path, capsys):
    for url in (WITH_PASSWORD, f"postgresql+psycopg://sweeper@db.example/study?password={SECRET}"):
        with pytest.raises(UserError, match=f"holds a password.*PGPASSWORD or ~/.pgpass.*{STORAGE_ENV}") as caught:
            SweepSettings(storage=url).validate()
        assert SECRET not in str(caught.value)
    (tmp_path / "grid.yaml").write_text("defaults: [config]\n")
    with pytest.raises(UserError, match="holds a password") as caught:  # before the resume command is printed
        run_workers("grid", [f"hydra.sweeper.storage={WITH_PASSWORD}"], config_dir=str(tmp_path), sweep_dir=str(tmp_path / "s"))
    assert SECRET not in str(caught.value) + capsys.readouterr().err
    SweepSettings(storage=WITHOUT).validate()  # PGPASSWORD or ~/.pgpass gives the password


def test_the_storage_comes_from_the_sweep_then_the_environment_then_study_db(tmp_path, monkeypatch):
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert sweep_storage(None, tmp_path) == f"sqlite:///{(tmp_path / 'study.db').resolve()}"
    monkeypatch.setenv(STORAGE_ENV, WITH_PASSWORD)
    assert sweep_storage(None, tmp_path) == WITH_PASSWORD
    assert sweep_storage("postgresql+psycopg://other@host/db", tmp_path) == "postgresql+psycopg://other@host/db"


def test_urls_are_written_without_the_password_and_printed_with_it_hidden(monkeypatch):
    assert without_password(WITH_PASSWORD) == WITHOUT
    assert hide_password(WITH_PASSWORD) == "postgresql+psycopg://sweeper:***@db.example:5432/study?sslmode=require"
    assert SECRET not in hide_password(f"{WITHOUT}&password={SECRET}") and hide_password("not a url") == "<storage URL>"
    # a raw @ in the password: SQLAlchemy ends the password at the first one, the printed form hides all of it
    assert hide_password("postgresql://u:p@ss@host/db") == "postgresql://u:***@host/db"
    monkeypatch.setenv(STORAGE_ENV, WITH_PASSWORD)  # a trial gets the URL without it and takes it back from here
    assert with_password(WITHOUT) == WITH_PASSWORD
    assert with_password("postgresql+psycopg://sweeper@db.example:5432/other") == "postgresql+psycopg://sweeper@db.example:5432/other"


def test_any_text_is_printed_with_every_password_masked():
    """What the Makefile prints its command lines through (make sweep ARGS=...: test_sweep_e2e.py)."""
    special = "p@ss:w/rd?#!%40"  # a raw @, :, /, ? and # in it too: masked whole, up to the last @
    line = f"sweep hydra.sweeper.storage=postgresql+psycopg://sweeper:{special}@db.example:5432/study 'x=a b'"
    assert mask_passwords(line) == "sweep hydra.sweeper.storage=postgresql+psycopg://sweeper:***@db.example:5432/study 'x=a b'"
    assert mask_passwords(WITH_PASSWORD) == hide_password(WITH_PASSWORD)  # as the sweep prints one URL
    several = f"a={WITH_PASSWORD},mysql://root:{SECRET}2@h/db b=https://u:{SECRET}3@example.com/x"
    assert mask_passwords(several) == f"a={hide_password(WITH_PASSWORD)},mysql://root:***@h/db b=https://u:***@example.com/x"
    keys = f"{WITHOUT}&password={SECRET}&x=1 PGPASSWORD='{SECRET} 2' db.password=\"{SECRET}\""
    assert mask_passwords(keys) == f"{WITHOUT}&password=***&x=1 PGPASSWORD=*** db.password=***"
    for clean in (WITHOUT, "sqlite:////tmp/s/study.db postgresql://db.example:5432/study", "user@host:path a:b@c", ""):
        assert mask_passwords(clean) == clean
