"""The embedded story generator, checked against facts read off the text itself."""

from __future__ import annotations

import re

import pytest

from normlab.data.synthetic import TRAIN_STREAM, VAL_STREAM, generate_stories

WORD = re.compile(r"[A-Za-z]+")


@pytest.fixture(scope="module")
def sample() -> list[str]:
    return generate_stories(5000, seed=1234)


def test_deterministic_and_seed_sensitive() -> None:
    a = generate_stories(50, seed=7)
    assert a == generate_stories(50, seed=7)
    b = generate_stories(50, seed=8)
    assert sum(x != y for x, y in zip(a, b, strict=True)) >= 45
    # a longer request extends a shorter one; `start` continues the stream
    assert generate_stories(80, seed=7)[:50] == a
    assert generate_stories(30, seed=7, start=50) == generate_stories(80, seed=7)[50:]


def test_train_and_validation_streams_are_disjoint() -> None:
    train = generate_stories(3000, seed=1234, stream=TRAIN_STREAM)
    val = generate_stories(500, seed=1234, stream=VAL_STREAM)
    assert not set(train) & set(val)
    assert len(set(train)) == len(train)  # no story repeats within a split either


def test_vocabulary_between_one_and_two_thousand_words(sample: list[str]) -> None:
    words = {w.lower() for s in sample for w in WORD.findall(s)}
    assert 1000 <= len(words) <= 2000, len(words)


def test_lengths_and_dialogue(sample: list[str]) -> None:
    lengths = sorted(len(s.split()) for s in sample)
    assert all(s.strip() == s and s for s in sample)
    assert lengths[0] >= 60 and lengths[-1] <= 320, (lengths[0], lengths[-1])
    assert 120 <= lengths[len(lengths) // 2] <= 220
    with_quotes = [s for s in sample if re.search(r'"[A-Z][^"]*[.!?,]"', s)]
    assert len(with_quotes) > len(sample) // 2
    assert all(s.count('"') % 2 == 0 for s in sample)  # every quotation is closed


def test_hero_name_persists_and_pronouns_agree(sample: list[str]) -> None:
    intro = re.compile(r"\b(girl|boy) (?:named|called) ([A-Z][a-z]+)")
    n_checked = 0
    for story in sample:
        m = intro.search(story.split(".")[0])
        if not m:
            continue
        kind, name = m.groups()
        n_checked += 1
        assert len(re.findall(rf"\b{name}\b", story)) >= 3, story
        # the hero's own pronoun shows up: "she"/"her" for a girl, "he"/"his"/"him" for a boy
        own = r"\b(she|her|herself)\b" if kind == "girl" else r"\b(he|his|him|himself)\b"
        assert re.search(own, story, re.IGNORECASE), story
    assert n_checked > 500


def test_every_story_has_a_beginning_and_an_ending(sample: list[str]) -> None:
    for story in sample[:500]:
        assert story[0].isupper() and story[-1] in '.!"', story
        assert "\n\n" in story  # paragraphs
        assert not re.search(r"[.!?] [a-z]", story), story  # sentences start with a capital
        assert "{" not in story and "}" not in story  # no unfilled template slot


def test_every_word_table_in_the_json_is_read_by_the_generator():
    """Unused word lists do not linger in synthetic_words.json: each of its tables is read by
    synthetic_words.py (a table left behind after its constant went would fail here)."""
    import inspect
    import json
    import re
    from importlib import resources

    import normlab.data.synthetic_words as words

    tables = json.loads(
        resources.files("normlab.data").joinpath(words.WORDS_FILE).read_text(encoding="utf-8")
    )
    read = set(re.findall(r'(?:_WORDS\[|_table\()"([a-z_]+)"', inspect.getsource(words)))
    assert set(tables) - read == set(), "tables nothing reads"
    assert read - set(tables) == set(), "tables read but not in the file"
