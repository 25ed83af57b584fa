"""agentcollapse: multi-turn agent RL that watches for, explains and prevents template collapse."""

__version__ = "0.1.0"
