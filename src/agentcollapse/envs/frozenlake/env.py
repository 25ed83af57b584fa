"""FrozenLake as a multi-turn text game; the dynamics are Gymnasium's, only maps and text are ours.

Maps: random 4x4, frozen probability 0.9, distinct start and goal, solvable, all from the env seed.
``slip`` is the chance that a move goes to one of the two perpendicular directions instead
(Gymnasium's ``success_rate = 1 - slip``). The observation restates the grid, the coordinates and a
neighbour line ("left hole, down ice, ..."): the tiny policy only perceived holes once it had one.
"""

from __future__ import annotations

import random
from collections import deque
from typing import ClassVar

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake

from agentcollapse.config.env_kwargs import FrozenLakeKwargs
from agentcollapse.envs import register
from agentcollapse.envs.base import TextEnv
from agentcollapse.errors import UserError

# Gymnasium's action ids.
ACTIONS: dict[str, int] = {"left": 0, "down": 1, "right": 2, "up": 3}
ACTION_NAMES = ("Left", "Down", "Right", "Up")
_DELTAS = {0: (0, -1), 1: (1, 0), 2: (0, 1), 3: (-1, 0)}
_CELL_WORD = {"F": "ice", "S": "ice", "H": "hole", "G": "goal"}


def generate_map(size: int, frozen_prob: float, rng: np.random.Generator) -> list[str]:
    """A solvable map with random, distinct start and goal (rows of S/F/H/G)."""
    while True:
        board = rng.choice(["F", "H"], size=(size, size), p=[frozen_prob, 1 - frozen_prob])
        cells = [(r, c) for r in range(size) for c in range(size)]
        start, goal = (cells[i] for i in rng.choice(len(cells), size=2, replace=False))
        board[start] = "S"
        board[goal] = "G"
        desc = ["".join(row) for row in board]
        if shortest_path(desc, start) is not None:
            return desc


def shortest_path(desc: list[str], start: tuple[int, int]) -> list[int] | None:
    """BFS over safe cells; the action ids of one shortest path to G, or None when unreachable."""
    n_rows, n_cols = len(desc), len(desc[0])
    parents: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    queue = deque([start])
    while queue:
        pos = queue.popleft()
        if desc[pos[0]][pos[1]] == "G":
            path = []
            while parents[pos] is not None:
                pos, action = parents[pos]  # type: ignore[misc]
                path.append(action)
            return path[::-1]
        for action in range(4):
            dr, dc = _DELTAS[action]
            nxt = (pos[0] + dr, pos[1] + dc)
            if 0 <= nxt[0] < n_rows and 0 <= nxt[1] < n_cols and nxt not in parents and desc[nxt[0]][nxt[1]] != "H":
                parents[nxt] = (pos, action)
                queue.append(nxt)
    return None


_D = FrozenLakeKwargs()  # the constructor's defaults: their one source (conf/env/frozenlake.yaml composes the same)


@register("frozenlake")
class FrozenLakeEnv(TextEnv):
    name = "frozenlake"
    action_ids = ACTIONS
    templates: ClassVar[tuple[str, ...]] = (
        "I should think about the safest move and then act carefully .",
        "Let me consider my options and pick a good direction .",
        "I will move carefully toward the goal and avoid danger .",
        "I need to reach the goal , so I choose a good move .",
    )

    def __init__(
        self,
        size: int = _D.size,
        frozen_prob: float = _D.frozen_prob,
        slip: float = _D.slip,
        max_turns: int = _D.max_turns,
        max_actions_per_turn: int = _D.max_actions_per_turn,
        max_actions: int = _D.max_actions,
    ) -> None:
        super().__init__()
        if not 0.0 <= slip <= 1.0:
            raise UserError(f"env.kwargs.slip={slip} is outside [0, 1]; use e.g. slip=0.1")
        if not 0.0 < frozen_prob <= 1.0:
            raise UserError(f"env.kwargs.frozen_prob={frozen_prob} is outside (0, 1]")
        self.size, self.frozen_prob, self.slip = size, frozen_prob, slip
        self.max_turns, self.max_actions_per_turn, self.max_actions = max_turns, max_actions_per_turn, max_actions
        self.desc: list[str] = []
        self.gym: GymFrozenLake | None = None

    @property
    def system_prompt(self) -> str:
        return (
            "FrozenLake : reach the goal G , never step into a hole O . P is you , _ is ice . "
            "Reply <think> reasoning </think> <answer> one or two of Left , Down , Right , Up joined by || </answer> ."
        )

    def _reset(self, seed: int) -> None:
        self.desc = generate_map(self.size, self.frozen_prob, np.random.default_rng(seed))
        self.gym = GymFrozenLake(desc=self.desc, is_slippery=self.slip > 0, success_rate=1.0 - self.slip)
        self.gym.reset(seed=seed)

    @property
    def position(self) -> tuple[int, int]:
        assert self.gym is not None, "call reset(seed) first"
        return divmod(int(self.gym.s), self.size)

    @property
    def goal(self) -> tuple[int, int]:
        flat = "".join(self.desc).index("G")
        return divmod(flat, self.size)

    def _apply(self, action: int) -> float:
        assert self.gym is not None, "call reset(seed) first"
        _, reward, terminated, _, _ = self.gym.step(action)
        if terminated:
            self.terminal = True
            self.success = self.desc[self.position[0]][self.position[1]] == "G"
        return float(reward)

    def render_grid(self) -> str:
        row_p, col_p = self.position
        rows = []
        for r, line in enumerate(self.desc):
            cells = []
            for c, ch in enumerate(line):
                if (r, c) == (row_p, col_p):
                    cells.append({"H": "X", "G": "√"}.get(ch, "P"))
                else:
                    cells.append({"H": "O", "G": "G"}.get(ch, "_"))
            rows.append(" ".join(cells))
        return "\n".join(rows)

    def neighbours(self) -> dict[str, str]:
        """What lies one step in each direction: ice, hole, goal or wall (the grid edge)."""
        row, col = self.position
        out = {}
        for action, (dr, dc) in _DELTAS.items():
            r, c = row + dr, col + dc
            inside = 0 <= r < self.size and 0 <= c < self.size
            out[ACTION_NAMES[action].lower()] = _CELL_WORD[self.desc[r][c]] if inside else "wall"
        return out

    def goal_direction(self) -> str:
        """Where the goal lies relative to the player, e.g. "down and right" ("here" on it)."""
        row, col = self.position
        g_row, g_col = self.goal
        vertical = "down" if g_row > row else "up" if g_row < row else ""
        horizontal = "right" if g_col > col else "left" if g_col < col else ""
        return " and ".join(d for d in (vertical, horizontal) if d) or "here"

    def observation(self) -> str:
        # The player's line comes last, next to where the reasoning starts: a small model copies
        # nearby facts long before it learns to look far back.
        row, col = self.position
        g_row, g_col = self.goal
        around = " , ".join(f"{d} {what}" for d, what in self.neighbours().items())
        return (
            f"{self.render_grid()}\n"
            f"The goal is at ( {g_row} , {g_col} ) , {self.goal_direction()} of you .\n"
            f"Around you : {around} .\n"
            f"You are at ( {row} , {col} ) ."
        )

    def grounding(self, think: str) -> float | None:
        """Checks the position named (the first coordinate pair that is not the goal's) and every
        hole claim ("hole left", "no hole", "all sides are safe") against the current state."""
        words = think.lower().split()
        claims: list[bool] = []
        pairs = [(words[i + 1], words[i + 3]) for i in range(len(words) - 4) if words[i] == "(" and words[i + 4] == ")"]
        goal = tuple(str(x) for x in self.goal)
        named = [p for p in pairs if p != goal]
        if named:
            claims.append(named[0] == tuple(str(x) for x in self.position))
        holes = {d for d, what in self.neighbours().items() if what == "hole"}
        if "hole" in words:
            if "no" in words or "safe" in words:
                claims.append(not holes)
            else:
                start = words.index("hole") + 1
                end = words.index(".", start) if "." in words[start:] else len(words)
                said = {w for w in words[start:end] if w in ("left", "down", "right", "up")}
                claims.append(said == holes)
        elif "safe" in words:
            claims.append(not holes)
        return float(sum(claims) / len(claims)) if claims else None

    # -- planner ----------------------------------------------------------------------------
    def plan(self) -> list[int] | None:
        return shortest_path(self.desc, self.position)

    def demonstration(self, rng: random.Random, suboptimal_prob: float = 0.0) -> tuple[str, str]:
        """Position, goal direction, hazards, then the move: every clause true of the current state."""
        row, col = self.position
        path = self.plan() or [rng.randrange(4)]
        n_moves = min(len(path), self.max_actions_per_turn, rng.choice((1, 2)))
        actions = list(path[:n_moves])
        if rng.random() < suboptimal_prob:
            actions = [rng.randrange(4) for _ in range(n_moves)]
        direction = self.goal_direction()
        holes = [d for d, what in self.neighbours().items() if what == "hole"]
        first = ACTION_NAMES[actions[0]].lower()
        parts = [
            rng.choice((f"I am at ( {row} , {col} ) .", f"My position is ( {row} , {col} ) .", f"I stand at ( {row} , {col} ) .")),
            rng.choice((f"The goal is {direction} .", f"The goal lies {direction} of me .", f"I need to go {direction} .")),
        ]
        if holes:
            parts.append(rng.choice((f"There is a hole {' and '.join(holes)} .", f"Avoid the hole {' and '.join(holes)} .")))
        else:
            parts.append(rng.choice(("No hole next to me .", "All sides are safe .")))
        parts.append(rng.choice((f"So I move {first} .", f"Going {first} is the plan .", f"I will go {first} .")))
        return " ".join(parts), " || ".join(ACTION_NAMES[a] for a in actions)
