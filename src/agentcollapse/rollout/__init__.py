"""Batched multi-turn rollouts (``runner``, ``generate``), the batch they produce (``batch``) and the
training sequences built from it (``sequences``)."""
