"""PPO's critic head on the policy."""

from __future__ import annotations

import torch

__all__ = ["ValueHead"]


class ValueHead(torch.nn.Module):
    """PPO critic: a linear read-out of the policy's last hidden state."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)
