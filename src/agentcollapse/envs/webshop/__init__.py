"""WebShop: the shopping env (``env.py``), its catalogue and instructions (``data.py``: generated or the
original's files) and the original's graded reward (``reward.py``)."""

from agentcollapse.envs.webshop.env import WebShopEnv

__all__ = ["WebShopEnv"]
