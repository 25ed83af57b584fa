"""Where the config files are: the repository's top-level ``conf/``, which a wheel ships inside the
package as ``agentcollapse/conf`` (pyproject's force-include), so a plain ``pip install .`` finds it too."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONF_DIR", "group_options"]


def _conf_dir() -> Path:
    package = Path(__file__).resolve().parents[1]
    installed = package / "conf"  # a wheel install
    return installed if installed.is_dir() else package.parents[1] / "conf"  # a checkout: src/agentcollapse -> the repository


CONF_DIR = str(_conf_dir())


def group_options(group: str) -> list[str]:
    """The choices of a config group: the YAML files under conf/<group>/."""
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))
