"""How the update splits its sequences into micro-batches: by length, or one group's prompt per
micro-batch where running each prompt once computes fewer token positions."""

from agentcollapse.lightning.update import micro_batches
from agentcollapse.rollout.sequences import Sequences


def _groups(prompt_len: int, response_lens: list[list[int]]) -> Sequences:
    ids, mask, traj = [], [], []
    for g, lens in enumerate(response_lens):
        prompt = [100 + g] * prompt_len
        for n in lens:
            ids.append(prompt + [7] * n)
            mask.append([0] * prompt_len + [1] * n)
            traj.append(len(traj))
    return Sequences(ids, mask, traj, [True] * len(ids))


def test_long_shared_prompts_go_one_group_per_micro_batch():
    seqs = _groups(80, [[40, 38, 40, 39], [40, 40, 37, 40]])  # single-turn: the prompt is 2/3 of a sequence
    assert any(len({i // 4 for i in b}) > 1 for b in micro_batches(seqs, 4))  # by length alone, groups mix
    shared = micro_batches(seqs, 4, share_prompts=True)
    assert sorted(i for b in shared for i in b) == list(range(8))
    assert all(len({i // 4 for i in b}) == 1 for b in shared)  # one group each


def test_spread_lengths_keep_the_length_sorted_micro_batches():
    # multi-turn-like: short prompts, continuations from 20 to 600 tokens in every group
    seqs = _groups(10, [[20, 600, 30, 580], [25, 590, 35, 610]])
    plain = micro_batches(seqs, 4)
    assert micro_batches(seqs, 4, share_prompts=True) == plain
    assert all(max(len(seqs.input_ids[i]) for i in b) < 100 or min(len(seqs.input_ids[i]) for i in b) > 500 for b in plain)
