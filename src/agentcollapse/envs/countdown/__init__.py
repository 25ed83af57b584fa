"""Countdown: the single-answer task (``env.py``) over its expressions, solver and puzzles (``expressions.py``)."""

from agentcollapse.envs.countdown.env import CountdownEnv

__all__ = ["CountdownEnv"]
