"""Hydra discovers this package (``hydra_plugins`` is a namespace package) and registers
``hydra/sweeper=agentcollapse``; the sweeper lives in :mod:`.sweeper`."""
