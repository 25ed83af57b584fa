"""FrozenLake (``env.py``: Gymnasium's dynamics, our maps and text)."""

from agentcollapse.envs.frozenlake.env import FrozenLakeEnv

__all__ = ["FrozenLakeEnv"]
