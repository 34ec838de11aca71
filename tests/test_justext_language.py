"""jusText's `language: auto`: the stoplist of `<html lang>`, else of the page's words;
an unknown stoplist is refused with the valid names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.justext.extractor import (
    ALGORITHM,
    ALL_LANGUAGES,
    stoplist_of_code,
    stoplist_of_words,
)

PARAGRAPH = ("<p>Der Hund läuft über die Straße und ist nicht allein, denn die Kinder spielen "
             "mit ihm im Garten des Hauses, wo auch die Katze wohnt und schläft. Am Abend "
             "kommen die Eltern nach Hause und sie essen gemeinsam, bevor sie in den Wald "
             "gehen, der hinter dem Dorf liegt und in dem es viele Bäume gibt.</p>")
PAGE = ('<html{lang}><body><div><a href="/">Startseite</a> <a href="/k">Kontakt</a></div>'
        + PARAGRAPH * 3 + "</body></html>")


def test_language_tags_map_to_stoplists() -> None:
    assert stoplist_of_code("de-AT") == "German"
    assert stoplist_of_code("nb") == "Norwegian_Bokmal"
    assert stoplist_of_code("zh") is None  # jusText has no Chinese stoplist
    assert stoplist_of_code("not a tag") is None


def test_the_words_pick_the_stoplist() -> None:
    german = "der Hund ist nicht in dem Haus und die Katze auch"
    english = "the dog is not in the house and the cat too"
    assert stoplist_of_words(german.split(" ")) == "German"
    assert stoplist_of_words(english.split(" ")) == "English"
    assert stoplist_of_words(["这是", "中文"]) == ALL_LANGUAGES


@pytest.mark.parametrize("lang", [' lang="de"', ""])
def test_auto_keeps_german_text_the_english_default_drops(lang: str) -> None:
    page = PAGE.format(lang=lang)
    auto = ALGORITHM.run(page, {"language": "auto"}).text
    assert "Der Hund läuft" in auto
    assert "Startseite" not in auto
    assert ALGORITHM.run(page, {}).text == ""


def test_an_unknown_stoplist_lists_the_valid_names() -> None:
    with pytest.raises(ValidationError) as caught:
        ALGORITHM.run(PAGE.format(lang=""), {"language": "Klingon"})
    message = str(caught.value)
    assert "'auto', 'all'" in message
    assert "German" in message
    assert "Norwegian_Nynorsk" in message
