"""Scoring: hand-computed counts, the TN and block rules, zero cases, and an
independent bag-of-words computation on real pages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import orchestrator.scoring as scoring
import shared.alignment as alignment
from orchestrator.models import Counts
from orchestrator.scoring import PageReference, prepare_page, score_empty, score_extraction
from shared.alignment import lcs_length
from shared.contract import Block
from shared.html import parse_html, visible_text
from shared.tokens import combining_marks, tokenize
from tests.helpers import dataset_pages, independent_bag_f1


def page(text: str) -> str:
    return f"<html><body><p>{text}</p></body></html>"


def test_alignment_counts_order_bag_does_not() -> None:
    ref = prepare_page(page("x a b c d y"), "a b c d")
    scores = score_extraction(ref, "d c b a", None)
    # LCS of "d c b a" and "a b c d" is one token; the page's boilerplate is {x, y}.
    assert scores.word == Counts(tp=1, fp=3, fn=3, tn=0)
    assert scores.word_bag == Counts(tp=4, fp=0, fn=0, tn=2)
    assert scores.block is None


def test_true_negatives_are_the_boilerplate_the_extract_dropped() -> None:
    ref = prepare_page(page("menu home a b c footer"), "a b c")
    assert ref.boilerplate == 3
    scores = score_extraction(ref, "home a b c", None)
    assert scores.word == Counts(tp=3, fp=1, fn=0, tn=2)
    assert scores.word_bag == Counts(tp=3, fp=1, fn=0, tn=2)
    assert scores.word.fallout == pytest.approx(1 / 3)
    assert scores.word.accuracy == pytest.approx(5 / 6)
    assert scores.word.precision == pytest.approx(0.75)
    assert scores.word.recall == 1.0
    assert scores.word.f1 == pytest.approx(2 * 0.75 / 1.75)


def test_repeated_words_count_with_multiplicity() -> None:
    ref = prepare_page(page("the the the cat the"), "the cat")
    scores = score_extraction(ref, "the the cat", None)
    assert scores.word == Counts(tp=2, fp=1, fn=0, tn=2)  # B = 5 - 2 = 3, FP = 1
    # bag: page {the: 4, cat: 1} minus max(gold, extract) = {the: 2, cat: 1} -> 2 left.
    assert scores.word_bag == Counts(tp=2, fp=1, fn=0, tn=2)


def test_words_absent_from_page_and_gold_never_match_and_tn_never_negative() -> None:
    ref = prepare_page(page("a b"), "a b")
    scores = score_extraction(ref, "zz a qq b zz", None)
    assert scores.word == Counts(tp=2, fp=3, fn=0, tn=0)
    assert scores.word_bag == Counts(tp=2, fp=3, fn=0, tn=0)


def test_one_tokenizer_for_both_sides() -> None:
    ref = prepare_page(page("Menu. The ﬁle SYSTEM!"), "the file system")
    scores = score_extraction(ref, "THE FILE, system", None)
    assert scores.word == Counts(tp=3, fp=0, fn=0, tn=1)


def test_words_keep_their_combining_marks() -> None:
    # Devanagari vowel signs and viramas, Arabic points, an accent NFKC cannot compose.
    assert tokenize("हिन्दी किताब") == ["हिन्दी", "किताब"]
    assert tokenize("كَتَبَ كتب") == ["كَتَبَ", "كتب"]
    assert tokenize("q\u0303 x") == ["q\u0303", "x"]
    # Two Hindi words with the same consonants are different words.
    ref = prepare_page(page("किताब अच्छी है मेनू"), "किताब अच्छी है")
    assert score_extraction(ref, "कातिब अच्छा हो", None).word.tp == 0


def test_unspaced_scripts_letters_with_marks_and_no_punctuation() -> None:
    assert tokenize("カタ・カナ。漢字、") == list("カタカナ漢字")
    assert tokenize("ที่นี่ ฿5") == ["ที่", "นี่", "5"]  # Thai letters carry their marks
    assert tokenize("ကို ။ ទៅ ។") == ["ကို", "ទៅ"]


def test_mark_planes_hold_every_mark() -> None:
    assert combining_marks() == combining_marks((range(sys.maxunicode + 1),))


def test_empty_extract_and_error_pages() -> None:
    ref = prepare_page(page("nav nav a b c"), "a b c")
    empty = score_empty(ref)
    assert empty == score_extraction(ref, "", [])
    assert empty.word == Counts(tp=0, fp=0, fn=3, tn=2)
    assert empty.word_bag == Counts(tp=0, fp=0, fn=3, tn=2)
    assert (empty.word.precision, empty.word.recall, empty.word.f1) == (0.0, 0.0, 0.0)
    assert empty.word.fallout == 0.0
    assert empty.word.accuracy == pytest.approx(2 / 5)


def test_zero_denominators_are_defined() -> None:
    both_empty = Counts()
    assert (both_empty.precision, both_empty.recall, both_empty.f1) == (1.0, 1.0, 1.0)
    assert (both_empty.fallout, both_empty.accuracy) == (0.0, 1.0)
    extract_only = Counts(fp=4, tn=1)  # empty gold, something extracted
    assert (extract_only.precision, extract_only.recall, extract_only.f1) == (0.0, 0.0, 0.0)
    assert extract_only.fallout == pytest.approx(0.8)
    nothing_gold_nothing_kept = Counts(tn=7)
    assert nothing_gold_nothing_kept.f1 == 1.0
    assert Counts(tp=1, fn=1) + Counts(fp=2, tn=3) == Counts(tp=1, fp=2, fn=1, tn=3)
    with pytest.raises(KeyError):
        both_empty.metric("specificity")


def test_page_without_words() -> None:
    ref = prepare_page("<html><body><script>var a = 1;</script></body></html>", "")
    scores = score_extraction(ref, "", None)
    assert scores.word == Counts()
    assert scores.word.f1 == 1.0


def test_block_rule_majority_of_aligned_tokens() -> None:
    gold = "alpha beta gamma delta epsilon"
    ref = prepare_page(page("home news alpha beta gamma delta epsilon contact us"), gold)
    blocks = [
        Block(text="Home News", is_content=True),             # no gold token: FP
        Block(text="Alpha beta gamma", is_content=True),      # 3/3 aligned: TP
        Block(text="***", is_content=True),                   # no tokens: ignored
        Block(text="delta epsilon contact", is_content=False),  # 2/3 aligned: FN
        Block(text="us", is_content=False),                   # 0/1: TN
    ]
    assert score_extraction(ref, "", blocks).block == Counts(tp=1, fp=1, fn=1, tn=1)


def test_block_tie_is_boilerplate_and_empty_blocks_give_none() -> None:
    ref = prepare_page(page("alpha menu"), "alpha")
    tie = [Block(text="alpha menu", is_content=True)]
    assert score_extraction(ref, "alpha menu", tie).block == Counts(fp=1)
    assert score_extraction(ref, "alpha", [Block(text="!!", is_content=True)]).block is None
    assert score_extraction(ref, "alpha", []).block is None


def test_blocks_equal_to_page_tokens_reuse_the_page_alignment() -> None:
    html = "<html><body><p>one two three</p><div>four five</div></body></html>"
    ref = prepare_page(html, "two three four")
    same = [Block(text="one two three", is_content=True), Block(text="four five", is_content=False)]
    other = [Block(text="one two three", is_content=True), Block(text="four", is_content=False)]
    assert score_extraction(ref, "", same).block == Counts(tp=1, fn=0, fp=0, tn=1)
    assert "page_gold_mask" in vars(ref)  # the shared page alignment was used
    # a different token sequence is aligned on its own and still labelled right
    assert score_extraction(ref, "", other).block == Counts(tp=1, fn=1)


words = st.lists(st.sampled_from(["a", "b", "c", "d", "e", "the", "x"]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(page_words=words, gold_words=words, extract_words=words)
def test_count_invariants(page_words: list[str], gold_words: list[str],
                          extract_words: list[str]) -> None:
    ref = PageReference(page_words, gold_words)
    scores = score_extraction(ref, " ".join(extract_words), None)
    for counts in (scores.word, scores.word_bag):
        assert counts.tp + counts.fn == len(gold_words)
        assert counts.tp + counts.fp == len(extract_words)
        assert min(counts.tp, counts.fp, counts.fn, counts.tn) >= 0
        for name in ("precision", "recall", "f1", "fallout", "accuracy"):
            assert 0.0 <= counts.metric(name) <= 1.0
    assert scores.word.tp == lcs_length(extract_words, gold_words)
    assert scores.word.tp <= scores.word_bag.tp
    assert scores.word.tn <= len(page_words)


def test_encoding_matches_plain_token_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-character-per-token encoding (including ranks past the surrogate
    range) gives the same counts as aligning the token lists themselves."""
    vocabulary = [f"w{i}" for i in range(60_000)]
    page_words = vocabulary + vocabulary[::7]
    gold_words = [*vocabulary[100:59_000:3], "w59999"]
    extract_words = [*vocabulary[:30_000:2], *vocabulary[59_990:], "nowhere"]
    encoded = PageReference(page_words, gold_words)
    assert isinstance(encoded.page_seq, str)
    assert max(encoded.page_seq) > "\udfff"  # ranks beyond the surrogates were used
    monkeypatch.setattr(alignment, "_MAX_CODES", 10)
    plain = PageReference(page_words, gold_words)
    assert isinstance(plain.page_seq, list)
    text = " ".join(extract_words)
    assert score_extraction(encoded, text, None) == score_extraction(plain, text, None)
    assert score_extraction(encoded, text, None).word.tp == lcs_length(extract_words, gold_words)


def test_bag_f1_equals_independent_computation_on_real_pages(scrapinghub: Path) -> None:
    from services.justext.extractor import ALGORITHM

    checked = 0
    for html, gold in dataset_pages(scrapinghub, 25):
        ref = prepare_page(html, gold)
        reply = ALGORITHM.run(html, {}, None)
        extracts = {"justext": (reply.text, reply.blocks),
                    "visible": (visible_text(parse_html(html)), None)}
        for text, blocks in extracts.values():
            scores = score_extraction(ref, text, blocks)
            assert scores.word_bag.f1 == pytest.approx(independent_bag_f1(text, gold), abs=1e-3)
            assert scores.word.tp == lcs_length(tokenize(text), tokenize(gold))
            checked += 1
        visible = score_extraction(ref, *extracts["visible"])
        assert visible.word.recall <= 1.0
        assert visible.word.fn == len(ref.gold_tokens) - ref.page_gold_lcs
        assert visible.word.tn == 0  # keeping every word drops no boilerplate
    assert checked == 50


# Characters that NFKC or casefolding change, combine or expand, and separators.
_TRICKY = st.text(alphabet=st.sampled_from(
    ["a", "B", "e", "\u0301", "\u0308", "\u0345", "\ufb01", "\u2460", "\u00bd", "\u1100",
     "\u1161", "\u11a8", "ß", "İ", "Σ", " ", "\n", "-", "_", "1"]), max_size=10)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.tuples(_TRICKY, st.booleans()), max_size=6), gold=_TRICKY,
       joined=st.booleans())
def test_block_token_reuse_scores_as_tokenizing_the_text(
        texts: list[tuple[str, bool]], gold: str, joined: bool) -> None:
    """score_extraction takes a joined extract's tokens from its content blocks and
    remembers block tokens per page: the counts are those of tokenizing everything
    afresh (a new PageReference for each score, the text tokenized on its own)."""
    blocks = [Block(text=text, is_content=kept) for text, kept in texts]
    text = "\n".join(b.text for b in blocks if b.is_content) if joined else "a " + gold
    page_tokens = tokenize(" ".join(t for t, _ in texts))
    shared = PageReference(page_tokens, tokenize(gold))
    score_extraction(shared, text, blocks)  # fills the page's block-token memo
    fresh = PageReference(page_tokens, tokenize(gold))
    tokens = tokenize(text)
    expected_word = scoring.word_counts(fresh, tokens)
    expected_bag = scoring.bag_counts(fresh, tokens)
    scores = score_extraction(shared, text, blocks)
    assert (scores.word, scores.word_bag) == (expected_word, expected_bag)
    assert scores.block == score_extraction(PageReference(page_tokens, tokenize(gold)), text,
                                            blocks).block
