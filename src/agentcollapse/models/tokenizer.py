"""A word-level tokenizer built locally from env text (no download), with the response tags as
single tokens and a chat template, so the tiny policy reads and writes the same format as a real one.

Word-level keeps sequences short (each coordinate digit, symbol and word is one token), which is
what makes RL on a CPU affordable.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from agentcollapse.models.hf import PADDING_SIDE

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
FORMAT_TOKENS = ["<think>", "</think>", "<answer>", "</answer>"]
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
SPECIAL_TOKENS = [PAD, UNK, BOS, EOS, *FORMAT_TOKENS, *ROLE_TOKENS]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
# Words, punctuation runs and newlines (grid rows must stay apart); other whitespace separates.
_PRE = pre_tokenizers.Split(Regex(r"\w+|[^\w\s]+|\n"), behavior="removed", invert=True)


def words(text: str) -> list[str]:
    return [w for w, _ in _PRE.pre_tokenize_str(text)]


def build_tokenizer(corpus: Iterable[str], max_number: int = 1000) -> PreTrainedTokenizerFast:
    """Vocabulary = special tokens + every word in ``corpus`` + the integers below ``max_number``.

    Sorted, so the same corpus gives the same ids on every machine.
    """
    vocab_words: set[str] = {str(i) for i in range(max_number)}
    for text in corpus:
        for tag in SPECIAL_TOKENS:
            text = text.replace(tag, " ")
        vocab_words.update(words(text))
    ordered = SPECIAL_TOKENS + sorted(vocab_words - set(SPECIAL_TOKENS))
    vocab = {w: i for i, w in enumerate(ordered)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = _PRE
    core.add_special_tokens(SPECIAL_TOKENS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        additional_special_tokens=FORMAT_TOKENS + ROLE_TOKENS,
        padding_side=PADDING_SIDE,  # saved with the tiny model, as every policy pads (models.hf.pad_on_the_left)
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
