import math

import pytest

from agentcollapse.envs.retrieval import BM25Index, tokenize

CORPUS = [
    "The cat sat on the mat.",  # cat sat mat                (3 words)
    "A dog chased the cat, and the cat ran!",  # dog chased cat cat ran (5 words)
    "Birds fly.",  # birds fly                                  (2 words)
    "cat",  # cat                                               (1 word)
]


def test_tokenize_lowercases_splits_on_non_word_characters_and_drops_stopwords():
    assert tokenize("The Cat's 3rd-floor flat, in Zürich_2!") == ["cat", "s", "3rd", "floor", "flat", "zürich", "2"]
    assert tokenize("the of and") == []


def test_scores_match_bm25_computed_by_hand():
    index = BM25Index(CORPUS, k1=1.5, b=0.75)
    n, avgdl, k1, b = 4, (3 + 5 + 2 + 1) / 4, 1.5, 0.75

    def idf(df):
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def term(tf, length):
        return tf / (tf + k1 * (1 - b + b * length / avgdl))

    # "cat" is in docs 0, 1, 3 (df 3); "dog" in doc 1 only (df 1); doc 2 has neither.
    expected = {
        0: idf(3) * term(1, 3),
        1: idf(3) * term(2, 5) + idf(1) * term(1, 5),
        3: idf(3) * term(1, 1),
    }
    hits = index.search("Cat? DOG", k=10)
    assert [i for i, _ in hits] == sorted(expected, key=lambda i: -expected[i])
    for i, score in hits:
        assert score == pytest.approx(expected[i], rel=1e-5)
    assert len(index) == 4


def test_k_limits_the_hits_and_docs_scoring_zero_are_left_out():
    index = BM25Index(CORPUS)
    assert [i for i, _ in index.search("cat dog", k=2)] == [1, 3]
    assert index.search("fly", k=5) == [(2, pytest.approx(index.search("fly", k=1)[0][1]))]
    assert index.search("unicorn", k=5) == []


def test_ties_are_broken_by_the_lower_index():
    index = BM25Index(["red fox", "blue whale", "red fox", "red fox", "green frog"])
    hits = index.search("fox", k=2)
    assert [i for i, _ in hits] == [0, 2]
    assert hits[0][1] == hits[1][1] > 0
    assert [i for i, _ in index.search("fox", k=3)] == [0, 2, 3]


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_an_empty_query_raises(query):
    with pytest.raises(ValueError, match="empty query"):
        BM25Index(CORPUS).search(query, k=3)


def test_a_query_of_stopwords_only_raises_and_bad_arguments_are_rejected():
    index = BM25Index(CORPUS)
    with pytest.raises(ValueError, match="no searchable words"):
        index.search("the, of!", k=3)
    with pytest.raises(ValueError, match="k=0"):
        index.search("cat", k=0)
    with pytest.raises(ValueError, match="at least one document"):
        BM25Index([])
