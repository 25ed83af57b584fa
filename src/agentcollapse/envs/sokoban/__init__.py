"""Sokoban: the text game (``env.py``) over reverse-play levels (``levels.py``: the room, the push rule,
the generator and the planner)."""

from agentcollapse.envs.sokoban.env import SokobanEnv

__all__ = ["SokobanEnv"]
