"""Our diagnostics and filter inside other trainers. Each integration only adapts the other trainer's
batch to the inputs of our pure functions (``agentcollapse.diagnostics``, ``agentcollapse.filtering``)
and hands back what they return; the math stays where it is.

- :mod:`agentcollapse.integrations.trl`: ``CollapseGRPOTrainer``, TRL's ``GRPOTrainer`` with the MI
  proxy family, the reward-variance statistics, the RV filter and the collapse early stop
  (``pip install 'agentcollapse[trl]'``).

Nothing here is imported by the rest of the package: importing an integration is the only thing that
needs its trainer installed.
"""
