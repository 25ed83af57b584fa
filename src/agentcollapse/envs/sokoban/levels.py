"""Sokoban's levels and planner: the room, the push rule, the BFS solver, exact solution lengths and
the reverse-play level generator (``env.py`` plays them as a text game).

Levels come from reverse play: a room with a wall border and a few inner walls (3-6 in a 6x6 room;
the floor stays connected), boxes placed on their targets, the player on a free cell, then
``num_reverse_steps`` random reverse moves in which the player may pull the box behind it. A pull is
a push played backwards, so every visited state is solvable. A BFS backwards from the solved states
gives the exact shortest-solution length of every state; of the visited states that are not solved
and can be solved within ``max_steps`` actions, the generator keeps one whose solution length is
closest to a length drawn uniformly from 1..max_steps (so difficulties are spread), or draws a new
room from the same seeded stream (so a level is a function of its seed).

Cells are flat indices ``r * width + c`` with row 0 at the top; actions are 0..3 = up, down, left, right.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable

from agentcollapse.errors import UserError

DELTAS = ((-1, 0), (1, 0), (0, -1), (0, 1))  # (row, col) step of each action
OPPOSITE = (1, 0, 3, 2)  # the action that undoes each action's step

MAX_GENERATION_ATTEMPTS = 2000
MAX_SEARCH_STATES = 200_000
PULL_PROB = 0.8
KEEP_PULLING_PROB = 0.5

State = tuple[int, frozenset[int]]  # (player cell, box cells); cells are flat indices r * width + c

__all__ = ["DELTAS", "OPPOSITE", "Room", "State", "bfs_solve", "connected", "generate_level", "push", "reverse_distances"]


class Room:
    """Static part of a level: size, walls, targets, and a neighbour table over flat cell indices."""

    def __init__(self, height: int, width: int, walls: Iterable[int], targets: Iterable[int]) -> None:
        self.height, self.width = height, width
        self.walls = frozenset(walls)
        self.targets = frozenset(targets)
        # nbr[cell][action] = the adjacent cell, or -1 when it is a wall or outside the room.
        self.nbr: list[tuple[int, ...]] = []
        for cell in range(height * width):
            r, c = divmod(cell, width)
            row = []
            for dr, dc in DELTAS:
                rr, cc = r + dr, c + dc
                inside = 0 <= rr < height and 0 <= cc < width
                nxt = rr * width + cc
                row.append(nxt if inside and nxt not in self.walls else -1)
            self.nbr.append(tuple(row))

    def rc(self, cell: int) -> tuple[int, int]:
        return divmod(cell, self.width)


def push(room: Room, player: int, boxes: frozenset[int], action: int) -> tuple[int, frozenset[int], int | None]:
    """One forward move; returns (player, boxes, pushed-box origin or None). Blocked moves change nothing."""
    nxt = room.nbr[player][action]
    if nxt < 0:
        return player, boxes, None
    if nxt in boxes:
        beyond = room.nbr[nxt][action]
        if beyond < 0 or beyond in boxes:
            return player, boxes, None
        return nxt, (boxes - {nxt}) | {beyond}, nxt
    return nxt, boxes, None


def bfs_solve(room: Room, player: int, boxes: frozenset[int], max_depth: int) -> list[int] | None:
    """Shortest action-id sequence that puts every box on a target (BFS over (player, boxes))."""
    targets = room.targets
    if boxes <= targets:
        return []
    # Simple dead squares: a box in a non-target corner can never move again.
    dead = set()
    for cell in range(room.height * room.width):
        if cell in room.walls or cell in targets:
            continue
        n = room.nbr[cell]
        if (n[0] < 0 or n[1] < 0) and (n[2] < 0 or n[3] < 0):
            dead.add(cell)
    start: State = (player, boxes)
    parents: dict[State, tuple[State, int] | None] = {start: None}
    frontier = [start]
    depth = 0
    while frontier and depth < max_depth:
        depth += 1
        nxt_frontier = []
        for state in frontier:
            p, bx = state
            for action in range(4):
                np_, nb, pushed = push(room, p, bx, action)
                if np_ == p:
                    continue
                if pushed is not None and (nb - bx) & dead:
                    continue
                child = (np_, nb)
                if child in parents:
                    continue
                parents[child] = (state, action)
                if pushed is not None and nb <= targets:
                    path = [action]
                    cur = state
                    while parents[cur] is not None:
                        cur, a = parents[cur]  # type: ignore[misc]
                        path.append(a)
                    return path[::-1]
                nxt_frontier.append(child)
        if len(parents) > MAX_SEARCH_STATES:
            return None
        frontier = nxt_frontier
    return None


def reverse_distances(room: Room, max_depth: int) -> dict[State, int]:
    """Shortest solution length of every state solvable in at most ``max_depth`` moves.

    BFS from all solved states over reverse moves (the player steps to a free cell and may pull the
    box behind it); a reverse move undoes exactly one forward move, so distances are exact.
    """
    targets = room.targets
    free = [c for c in range(room.height * room.width) if c not in room.walls]
    frontier: list[State] = [(p, targets) for p in free if p not in targets]
    dist: dict[State, int] = {st: 0 for st in frontier}
    for depth in range(1, max_depth + 1):
        nxt_frontier = []
        for player, boxes in frontier:
            for action in range(4):
                nxt = room.nbr[player][action]
                if nxt < 0 or nxt in boxes:
                    continue
                children = [(nxt, boxes)]
                behind = room.nbr[player][OPPOSITE[action]]
                if behind in boxes:
                    children.append((nxt, (boxes - {behind}) | {player}))
                for child in children:
                    if child not in dist:
                        dist[child] = depth
                        nxt_frontier.append(child)
        frontier = nxt_frontier
        if len(dist) > MAX_SEARCH_STATES:
            break
    return dist


def connected(cells: set[int], width: int) -> bool:
    """Whether ``cells`` (flat indices in a room ``width`` wide) form one 4-connected region."""
    if not cells:
        return False
    start = next(iter(cells))
    seen = {start}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        r, c = divmod(cell, width)
        for dr, dc in DELTAS:
            nxt = (r + dr) * width + (c + dc)
            if nxt in cells and nxt not in seen and 0 <= c + dc < width:
                seen.add(nxt)
                queue.append(nxt)
    return len(seen) == len(cells)


def generate_level(
    rng: random.Random, dim_room: tuple[int, int], num_boxes: int, max_steps: int, num_reverse_steps: int
) -> tuple[Room, int, frozenset[int]]:
    """(room, player, boxes) of a level solvable in 1..``max_steps`` moves, drawn from ``rng`` by reverse
    play (the module's docstring); UserError when ``MAX_GENERATION_ATTEMPTS`` rooms give none."""
    height, width = dim_room
    for _ in range(MAX_GENERATION_ATTEMPTS):
        room, cells = _draw_room(rng, height, width, num_boxes)
        # Exact solution lengths (up to max_steps) of every state, by BFS backwards from the solved ones.
        dist = reverse_distances(room, max_steps)
        seen = _reverse_play(rng, room, cells, num_reverse_steps)
        chosen = _pick_by_difficulty(rng, seen, dist, max_steps)
        if chosen is not None:
            player, boxes = chosen
            return room, player, boxes
    raise UserError(
        f"could not generate a Sokoban level solvable in max_steps={max_steps} "
        f"(dim_room={list(dim_room)}, num_boxes={num_boxes}); raise max_steps or shrink the room"
    )


def _draw_room(rng: random.Random, height: int, width: int, num_boxes: int) -> tuple[Room, list[int]]:
    """A room with a wall border, a few inner walls that keep the floor connected, and ``num_boxes``
    targets on the floor; returns it and its floor cells."""
    border = {r * width + c for r in range(height) for c in range(width) if r in (0, height - 1) or c in (0, width - 1)}
    interior = [r * width + c for r in range(1, height - 1) for c in range(1, width - 1)]
    min_floor = 2 * num_boxes + 2
    floor = set(interior)
    n_walls = rng.randint(len(interior) // 5, len(interior) // 3 + 1)  # 3..6 inner walls in a 6x6 room
    for _ in range(4 * n_walls):
        if len(floor) <= max(min_floor, len(interior) - n_walls):
            break
        cell = rng.choice(interior)
        if cell in floor and connected(floor - {cell}, width):
            floor.discard(cell)
    cells = sorted(floor)
    targets = rng.sample(cells, num_boxes)
    return Room(height, width, border | (set(interior) - floor), targets), cells


def _reverse_play(rng: random.Random, room: Room, cells: list[int], num_reverse_steps: int) -> set[State]:
    """Every state a random walk from the solved room visits, the player pulling the box behind it
    most of the time (a pull is a push played backwards, so each state is solvable)."""
    origin = set(room.targets)
    player = rng.choice([c for c in cells if c not in origin])
    seen: set[State] = set()
    pulled_last = -1
    for _ in range(num_reverse_steps):
        # Keep pulling the same way half of the time, so boxes travel more than one cell.
        action = pulled_last if pulled_last >= 0 and rng.random() < KEEP_PULLING_PROB else rng.randrange(4)
        pulled_last = -1
        nxt = room.nbr[player][action]
        if nxt < 0 or nxt in origin:
            continue
        behind = room.nbr[player][OPPOSITE[action]]
        if behind in origin and rng.random() < PULL_PROB:
            origin.discard(behind)
            origin.add(player)
            pulled_last = action
        player = nxt
        seen.add((player, frozenset(origin)))
    return seen


def _pick_by_difficulty(rng: random.Random, seen: set[State], dist: dict[State, int], max_steps: int) -> State | None:
    """Of the visited states solvable within the budget (and not solved), one whose solution length is
    closest to a length drawn uniformly from 1..max_steps (a spread of difficulties); None if none is."""
    candidates = sorted((st for st in seen if dist.get(st, 0) > 0), key=lambda st: (st[0], sorted(st[1])))
    if not candidates:
        return None
    want = rng.randint(1, max_steps)
    gap = min(abs(dist[st] - want) for st in candidates)
    return rng.choice([st for st in candidates if abs(dist[st] - want) == gap])
