"""SearchQA: the search-and-answer env (``env.py``), its generated world of invented passages and questions
(``world.py``) and the loader of real corpora and questions (``data.py``)."""

from agentcollapse.envs.searchqa.env import SearchQAEnv
from agentcollapse.envs.searchqa.world import generate_world, make_question

__all__ = ["SearchQAEnv", "generate_world", "make_question"]
