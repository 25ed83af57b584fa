"""Sokoban as a multi-turn text game (docs/method.md section 7): rules, rewards and text.

Levels come from reverse play (``levels.py``: the room, the push rule, the generator and the
BFS planner): every level is solvable within ``max_steps`` actions, its shortest-solution lengths
spread over 1..max_steps, and ``reset(seed)`` is deterministic.

6x6 one-box levels form a small space (each room admits only a few dozen solvable states), so
distinct seeds can, rarely, give the same level; seeds 0..499 give 500 different ones (tested).

Rewards per executed action: -0.1 step, +1 box pushed onto a target, -1 box pushed off a target, +10
when every box is on a target (episode ends, success). A move into a wall, or a push of a box into a
wall or another box, changes nothing but still costs the step.

Cells are (row, col) with row 0 at the top. Grid symbols: ``#`` wall, ``_`` floor, ``O`` target,
``X`` box, ``√`` box on target, ``P`` player, ``S`` player on a target.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import ClassVar

from agentcollapse.config.env_kwargs import SokobanKwargs
from agentcollapse.envs import register
from agentcollapse.envs.base import TextEnv
from agentcollapse.envs.sokoban.levels import Room, State, bfs_solve, generate_level, push, reverse_distances
from agentcollapse.errors import UserError

_POSITION_CLAIM = re.compile(r"(I am at|Player|I stand at|box at|box|target at|target) \( (\d+) , (\d+) \)")

ACTION_NAMES = ("Up", "Down", "Left", "Right")
ACTIONS: dict[str, int] = {name.lower(): i for i, name in enumerate(ACTION_NAMES)}

STEP_REWARD = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_REWARD = -1.0
SOLVED_REWARD = 10.0

# bfs_solve, reverse_distances and State stay importable from here (the planner's old home)
__all__ = ["ACTIONS", "ACTION_NAMES", "Room", "SokobanEnv", "State", "bfs_solve", "reverse_distances"]


_D = SokobanKwargs()  # the constructor's defaults: their one source (conf/env/sokoban.yaml composes the same)


@register("sokoban")
class SokobanEnv(TextEnv):
    name = "sokoban"
    action_ids = ACTIONS
    templates: ClassVar[tuple[str, ...]] = (
        "I should think about the best move and then push carefully .",
        "Let me consider my options and choose a good direction .",
        "I will move the box carefully toward the target .",
        "I need to push the box onto the target , so I pick a good move .",
    )

    def __init__(
        self,
        dim_room: Sequence[int] = tuple(_D.dim_room),
        num_boxes: int = _D.num_boxes,
        max_steps: int = _D.max_steps,
        search_depth: int = _D.search_depth,
        num_reverse_steps: int = _D.num_reverse_steps,
        max_turns: int = _D.max_turns,
        max_actions_per_turn: int = _D.max_actions_per_turn,
    ) -> None:
        """``max_steps``: action budget per episode (also the longest shortest-solution a level may
        have); ``num_reverse_steps``: random reverse moves per generation attempt; ``search_depth``:
        depth limit of the BFS planner ``solve()``."""
        super().__init__()
        try:
            height, width = (int(x) for x in dim_room)
        except (TypeError, ValueError):
            raise UserError(f"env.kwargs.dim_room={dim_room!r} must be two integers, e.g. [6, 6]") from None
        if height < 3 or width < 3 or height * width > 400:
            raise UserError(f"env.kwargs.dim_room={[height, width]} must be between [3, 3] and 400 cells, e.g. [6, 6]")
        interior = (height - 2) * (width - 2)
        if num_boxes < 1 or 2 * num_boxes + 2 > interior:
            raise UserError(f"env.kwargs.num_boxes={num_boxes} does not fit a {height}x{width} room; use 1")
        if max_steps < 1 or search_depth < 1 or num_reverse_steps < 1:
            raise UserError("env.kwargs.max_steps, search_depth and num_reverse_steps must be >= 1")
        if max_turns < 1 or max_actions_per_turn < 1:
            raise UserError("env.kwargs.max_turns and max_actions_per_turn must be >= 1")
        self.dim_room = (height, width)
        self.num_boxes = int(num_boxes)
        self.max_steps = int(max_steps)
        self.max_actions = int(max_steps)
        self.search_depth = int(search_depth)
        self.num_reverse_steps = int(num_reverse_steps)
        self.max_turns = int(max_turns)
        self.max_actions_per_turn = int(max_actions_per_turn)
        self.room: Room | None = None
        self.player = -1
        self.boxes: frozenset[int] = frozenset()

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_layout(cls, text: str, **kwargs) -> SokobanEnv:
        """An env already reset to a hand-written level (symbols as in ``render_grid``; spaces optional).

        Cells outside the given rows count as walls. Extra kwargs go to ``__init__`` (e.g. max_steps).
        """
        rows = ["".join(line.split()) for line in text.strip().splitlines() if line.strip()]
        if not rows:
            raise UserError("empty Sokoban layout")
        width = max(len(r) for r in rows)
        walls, targets, boxes, players = set(), set(), set(), []
        for r, line in enumerate(rows):
            for c, ch in enumerate(line.ljust(width, "#")):
                cell = r * width + c
                if ch == "#":
                    walls.add(cell)
                elif ch in "O√S":
                    targets.add(cell)
                elif ch not in "_XP":
                    raise UserError(f"unknown Sokoban symbol {ch!r} at ({r}, {c}); use # _ O X √ P S")
                if ch in "X√":
                    boxes.add(cell)
                if ch in "PS":
                    players.append(cell)
        if len(players) != 1:
            raise UserError(f"a Sokoban layout needs exactly one player (P or S), found {len(players)}")
        if not boxes or len(boxes) != len(targets):
            raise UserError(f"a Sokoban layout needs as many boxes as targets (found {len(boxes)} and {len(targets)})")
        env = cls(**kwargs)
        env.dim_room, env.num_boxes = (len(rows), width), len(boxes)
        env.room = Room(len(rows), width, walls, targets)
        env.player, env.boxes = players[0], frozenset(boxes)
        env.turn = env.actions_taken = 0
        env.success = env.terminal = False
        return env

    def _reset(self, seed: int) -> None:
        self.room, self.player, self.boxes = generate_level(
            random.Random(seed), self.dim_room, self.num_boxes, self.max_steps, self.num_reverse_steps
        )

    # -- dynamics -------------------------------------------------------------------------
    def _apply(self, action: int) -> float:
        room = self._require_room()
        reward = STEP_REWARD
        player, boxes, pushed = push(room, self.player, self.boxes, action)
        if pushed is not None:
            landed = next(iter(boxes - self.boxes))
            was_on, now_on = pushed in room.targets, landed in room.targets
            if now_on and not was_on:
                reward += BOX_ON_TARGET_REWARD
            elif was_on and not now_on:
                reward += BOX_OFF_TARGET_REWARD
        self.player, self.boxes = player, boxes
        if self.boxes <= room.targets:
            reward += SOLVED_REWARD
            self.terminal = True
            self.success = True
        return reward

    # -- text -----------------------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        return (
            "You are solving Sokoban . Push every box X onto a target O by walking into it . "
            "# is a wall , _ is floor , √ is a box on a target , P is you , S is you on a target . "
            "Positions are ( row , col ) with row 0 at the top . "
            "Answer with <think> your reasoning </think> <answer> actions </answer> . "
            "Actions are Up , Down , Left , Right ; give one or two actions separated by || ."
        )

    def _require_room(self) -> Room:
        if self.room is None:
            raise RuntimeError("sokoban: call reset(seed) first")
        return self.room

    @property
    def position(self) -> tuple[int, int]:
        return self._require_room().rc(self.player)

    @property
    def box_positions(self) -> list[tuple[int, int]]:
        room = self._require_room()
        return [room.rc(b) for b in sorted(self.boxes)]

    @property
    def target_positions(self) -> list[tuple[int, int]]:
        room = self._require_room()
        return [room.rc(t) for t in sorted(room.targets)]

    def grounding(self, think: str) -> float | None:
        """Share of true position claims: where the player is (``I am at``, ``Player``, ``I stand
        at``), that a named ``box`` is a box and a named ``target`` is a target."""
        claims: list[bool] = []
        for what, row, col in _POSITION_CLAIM.findall(think):
            pos = (int(row), int(col))
            if what in ("I am at", "Player", "I stand at"):
                claims.append(pos == self.position)
            elif what.startswith("box"):
                claims.append(pos in self.box_positions)
            else:
                claims.append(pos in self.target_positions)
        return sum(claims) / len(claims) if claims else None

    def render_grid(self) -> str:
        room = self._require_room()
        rows = []
        for r in range(room.height):
            cells = []
            for c in range(room.width):
                cell = r * room.width + c
                on_target = cell in room.targets
                if cell in room.walls:
                    cells.append("#")
                elif cell == self.player:
                    cells.append("S" if on_target else "P")
                elif cell in self.boxes:
                    cells.append("√" if on_target else "X")
                else:
                    cells.append("O" if on_target else "_")
            rows.append(" ".join(cells))
        return "\n".join(rows)

    def neighbours(self) -> dict[str, str]:
        """What lies one step in each direction: wall, box, target or floor."""
        room = self._require_room()
        out = {}
        for action in range(4):
            nxt = room.nbr[self.player][action]
            if nxt < 0:
                what = "wall"
            elif nxt in self.boxes:
                what = "box"
            elif nxt in room.targets:
                what = "target"
            else:
                what = "floor"
            out[ACTION_NAMES[action].lower()] = what
        return out

    def observation(self) -> str:
        row, col = self.position
        boxes = " , ".join(_fmt(p) for p in self.box_positions)
        targets = " , ".join(_fmt(p) for p in self.target_positions)
        box_word, target_word = ("Box", "Target") if len(self.boxes) == 1 else ("Boxes", "Targets")
        around = " , ".join(f"{d} {what}" for d, what in self.neighbours().items())
        left = self.max_actions - self.actions_taken
        return (
            f"{self.render_grid()}\n"
            f"You are at {_fmt((row, col))} . {box_word} at {boxes} . {target_word} at {targets} .\n"
            f"Around you : {around} . Actions left : {left} ."
        )

    # -- planner --------------------------------------------------------------------------
    def solve(self) -> list[str] | None:
        """Action words of a shortest solution from the current state ([] if solved, None if none
        within ``search_depth`` moves)."""
        room = self._require_room()
        plan = bfs_solve(room, self.player, self.boxes, self.search_depth)
        return None if plan is None else [ACTION_NAMES[a] for a in plan]

    def demonstration(self, rng: random.Random, suboptimal_prob: float = 0.0) -> tuple[str, str]:
        room = self._require_room()
        plan = bfs_solve(room, self.player, self.boxes, self.search_depth)
        me = _fmt(self.position)
        if not plan:
            box = _fmt(self.box_positions[0])
            action = rng.randrange(4)
            reasoning = rng.choice(
                (
                    f"The box at {box} is stuck , no push reaches the target . I just move {ACTION_NAMES[action].lower()} .",
                    f"From {me} I cannot bring the box {box} to a target any more , so I try {ACTION_NAMES[action].lower()} .",
                )
            )
            return reasoning, ACTION_NAMES[action]
        n_moves = max(1, min(len(plan), self.max_actions_per_turn, self.max_actions - self.actions_taken))
        actions = list(plan[:n_moves])
        if rng.random() < suboptimal_prob:
            actions[0] = rng.choice([a for a in range(4) if a != actions[0]])

        # The next push in the plan: which box, which way, and the target nearest to it.
        player, boxes, push_box, push_dir = self.player, self.boxes, None, plan[0]
        for action in plan:
            player, new_boxes, pushed = push(room, player, boxes, action)
            if pushed is not None:
                push_box, push_dir = pushed, action
                break
            boxes = new_boxes
        if push_box is None:  # cannot happen for a non-empty plan, kept for safety
            push_box = next(iter(self.boxes))
        target = min(room.targets, key=lambda t: abs(room.rc(t)[0] - room.rc(push_box)[0]) + abs(room.rc(t)[1] - room.rc(push_box)[1]))
        box, goal = _fmt(room.rc(push_box)), _fmt(room.rc(target))
        push_word = ACTION_NAMES[push_dir].lower()
        moves = " then ".join(ACTION_NAMES[a].lower() for a in plan[:n_moves])
        parts = [
            rng.choice(
                (
                    f"I am at {me} , box at {box} , target at {goal} .",
                    f"Player {me} , box {box} , target {goal} .",
                    f"The box {box} must reach the target {goal} ; I stand at {me} .",
                )
            ),
            rng.choice(
                (
                    f"The box has to go {push_word} .",
                    f"I need to push it {push_word} .",
                    f"Pushing {push_word} brings it closer .",
                )
            ),
            rng.choice((f"So I move {moves} .", f"Next : {moves} .", f"I will go {moves} .")),
        ]
        return " ".join(parts), " || ".join(ACTION_NAMES[a] for a in actions)


def _fmt(pos: tuple[int, int]) -> str:
    return f"( {pos[0]} , {pos[1]} )"
