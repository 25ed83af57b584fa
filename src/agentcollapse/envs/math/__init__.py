"""Math: generated arithmetic word problems, one answer each (``env.py``)."""

from agentcollapse.envs.math.env import MathEnv

__all__ = ["MathEnv"]
