"""DeepCoder: the coding env (``env.py``) whose hidden tests run in ``agentcollapse.sandbox``, and its
generated problems or the loader of real ones (``problems.py``)."""

from agentcollapse.envs.deepcoder.env import DeepCoderEnv

__all__ = ["DeepCoderEnv"]
