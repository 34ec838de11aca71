"""Unit tests of the shared pieces: decoding, tokenizer, HTML blocks, alignment, contract."""

from __future__ import annotations

import codecs
import random
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from shared.alignment import aligned_mask, lcs_length
from shared.contract import Block, Extraction, ExtractRequest
from shared.decoding import NotHTMLError, check_html, decode_gold, decode_html, decode_text
from shared.html import parse_html, text_blocks, visible_text
from shared.tokens import tokenize

PAGE = ("<html><head><title>T</title></head>"
        "<body><p>Grüße aus Zürich – “quoted” café</p></body></html>")


class TestDecoding:
    def test_utf8_bom_wins_over_declaration(self) -> None:
        data = codecs.BOM_UTF8 + PAGE.replace("<head>", '<head><meta charset="latin-1">').encode()
        assert "Grüße" in decode_html(data)

    def test_declared_charset_used_when_bytes_fit(self) -> None:
        data = PAGE.replace("<head>", '<head><meta charset="windows-1252">').encode("cp1252")
        assert "“quoted”" in decode_html(data)

    def test_wrong_latin1_declaration_over_utf8_bytes(self) -> None:
        # Latin-1 decodes any bytes, so a false declaration must not win over clean UTF-8.
        data = PAGE.replace("<head>", '<head><meta charset="iso-8859-1">').encode("utf-8")
        assert "Grüße aus Zürich" in decode_html(data)

    @pytest.mark.parametrize("label", ["iso-8859-1", "latin1", "us-ascii"])
    def test_latin1_and_ascii_labels_read_as_windows_1252(self, label: str) -> None:
        # As browsers read them: the quotes and dashes of 0x80-0x9F, not C1 controls.
        data = PAGE.replace("<head>", f'<head><meta charset="{label}">').encode("cp1252")
        assert "Grüße aus Zürich – “quoted” café" in decode_html(data)

    def test_utf16_label_in_single_byte_page_is_ignored(self) -> None:
        data = PAGE.replace("<head>", '<head><meta charset="utf-16">').encode("cp1252")
        assert "Grüße aus Zürich – “quoted” café" in decode_html(data)

    @pytest.mark.parametrize("label", ["rot13", "base64", "hex", "undefined", "utf-7"])
    def test_labels_no_browser_knows_are_passed_over(self, label: str) -> None:
        """Python's codecs that no browser has: as transport or declared charset they are
        skipped (a browser would ignore them), never applied or fatal."""
        data = PAGE.replace("<head>", f'<head><meta charset="{label}">').encode("cp1252")
        assert "Grüße aus Zürich – “quoted” café" in decode_html(data)
        hidden = b"+ADw-script+AD4-alert(1)+ADw-/script+AD4-<p>Plain text.</p>"
        assert decode_html(hidden, label) == hidden.decode()

    @pytest.mark.parametrize(("label", "codec"), [("windows-874", "cp874"),
                                                  ("x-mac-cyrillic", "mac-cyrillic"),
                                                  ("Windows-31J", "cp932"),
                                                  ("x-cp1251", "cp1251")])
    def test_labels_python_lacks_read_as_browsers_read_them(self, label: str,
                                                            codec: str) -> None:
        from shared.decoding import browser_codec

        assert browser_codec(label) == codec

    def test_utf8_page_with_stray_windows_1252_bytes(self) -> None:
        data = (PAGE.replace("</body>", "").encode()
                + b"<p>It\x92s a \x93quoted\x94 phrase.</p></body></html>")
        text = decode_html(data)
        assert "Grüße aus Zürich" in text
        assert "It’s a “quoted” phrase." in text

    def test_the_transport_charset_wins_over_detection(self) -> None:
        from shared.answer import parse_extract_request

        page = "<html><body><p>Привет, мир! Как дела?</p></body></html>"
        request = parse_extract_request(page.encode("koi8_r"),
                                        'text/html; charset="KOI8-R"', {})
        assert "Привет, мир!" in request.html
        polish = "<p>Zażółć gęślą jaźń</p>".encode("iso8859_2")
        assert "Zażółć" in parse_extract_request(polish, "text/html;charset=iso-8859-2",
                                                 {}).html
        # A label that does not fit the bytes is passed over, as one that is unknown.
        assert "Grüße" in decode_html(PAGE.encode(), "shift_jis")
        assert "Grüße" in decode_html(PAGE.encode(), "no-such-charset")

    def test_a_json_body_may_begin_with_a_byte_order_mark(self) -> None:
        # RFC 8259, section 8.1: a parser may ignore one; editors and some clients write it.
        from shared.answer import parse_extract_request

        body = b"\xef\xbb\xbf" + orjson.dumps({"html": PAGE, "options": {}})
        assert "Zürich" in parse_extract_request(body, "application/json", {}).html

    def test_a_lone_less_than_sign_is_no_markup(self) -> None:
        with pytest.raises(NotHTMLError):
            decode_html(b"< not a tag, just text")

    def test_utf16_with_and_without_bom(self) -> None:
        assert "Zürich" in decode_html(PAGE.encode("utf-16"))
        assert "Zürich" in decode_html(PAGE.encode("utf-16-le"))

    def test_shift_jis_declared(self) -> None:
        page = ('<html><head><meta charset="shift_jis"></head>'
                "<body><p>日本語のテキストです</p></body></html>")
        assert "日本語" in decode_html(page.encode("shift_jis"))

    def test_undeclared_latin_text_reads_as_windows_1252(self) -> None:
        # Neither UTF-8 nor declared: a few accents and quotes, alone between ASCII
        # letters, read as browsers read them (charset-normalizer guessed cp1250 or
        # latin-1 for such pages).
        data = PAGE.encode("cp1252")
        assert "Grüße aus Zürich – “quoted” café" in decode_html(data)
        assert "\ufffd" in decode_html(data.replace(b"caf\xe9", b"caf\x81"))  # undefined byte

    @pytest.mark.parametrize("text", ["Grüße!", "Müße", "Größe", "Jäähalli", "Ähnliche Öfen",
                                      "Cocoa and Perl \u2014\xa0There's More"])
    def test_short_latin_text_with_accents_side_by_side_reads_as_windows_1252(
            self, text: str) -> None:
        # Two accented letters side by side are still Latin script; charset-normalizer
        # guessed UTF-16, big5 or EBCDIC for text this short.
        assert decode_text(text.encode("cp1252")) == text

    @pytest.mark.parametrize(("text", "encoding"), [
        ("Правительство объявило о новых мерах поддержки малого бизнеса. ", "cp1251"),
        ("Правительство объявило о новых мерах поддержки малого бизнеса. ", "koi8_r"),
        ("東京の桜が満開になりました。今日は良い天気ですね。", "shift_jis"),
        ("中华人民共和国国务院今天发布了新的经济政策。", "gb18030"),
    ])
    def test_undeclared_non_latin_text_is_detected(self, text: str, encoding: str) -> None:
        # Runs of non-ASCII bytes: the detector has evidence and decides.
        page = f"<html><head></head><body><p>{text * 3}</p></body></html>"
        assert text.strip() in decode_html(page.encode(encoding))

    def test_bogus_xml_declaration(self) -> None:
        data = (b'<?xml version="1.0" encoding="no-such-charset"?>'
                b"<html><body><p>ok text</p></body></html>")
        assert "ok text" in decode_html(data)

    @pytest.mark.parametrize("data", [b"", b"   \n ", random.Random(1).randbytes(2000),
                                      b"just some words without markup"])
    def test_not_html_refused(self, data: bytes) -> None:
        with pytest.raises(NotHTMLError):
            decode_html(data)

    def test_control_characters_alone_do_not_refuse_a_page(self) -> None:
        check_html("<p>text with a \x0b vertical tab</p>")

    @pytest.mark.parametrize("text", ["日本語のテキストです", "Le café déjà vu à l'école naïve",
                                      "Hello world, a plain text with one “quote” in it."])
    def test_utf8_gold_with_a_stray_byte_keeps_its_utf8(self, text: str) -> None:
        # The detector took such files for Shift-JIS, cp1250 or Mac Roman: words garbled.
        for bom, stray, read in ((b"", b"\x80", "€"), (codecs.BOM_UTF8, b" \x96 end", " – end")):
            gold, note = decode_gold(bom + text.encode() + stray)
            assert gold == text + read
            assert note is not None
            assert note.startswith("not valid UTF-8")

    @pytest.mark.parametrize(("text", "encoding"), [
        ("Größe, Straße, Düsseldorf, façade, naïve, déjà vu.", "latin-1"),
        ("Правительство объявило о новых мерах поддержки бизнеса.", "cp1251"),
        ("中华人民共和国国务院今天发布了新的经济政策。", "gbk"),
    ])
    def test_gold_in_a_legacy_charset_is_still_detected(self, text: str, encoding: str
                                                        ) -> None:
        gold, note = decode_gold((text * 3).encode(encoding))
        assert gold == text * 3
        assert note is not None
        assert "charset detection" in note


class TestTokens:
    def test_nfkc_casefold_words(self) -> None:
        assert tokenize("Straße ＡＢＣ ﬁne, don't") == ["strasse", "abc", "fine", "don", "t"]

    def test_empty(self) -> None:
        assert tokenize("  ... !!") == []


class TestHtml:
    def test_blocks_in_document_order_with_paths_and_links(self) -> None:
        root = parse_html(
            "<html><body><div>Intro <a href='#'>link text</a><p>Para one.</p>tail words"
            "<script>var x = 'hidden';</script><ul><li>item</li></ul></div></body></html>"
        )
        blocks = text_blocks(root)
        assert [b.text for b in blocks] == ["Intro link text", "Para one.", "tail words", "item"]
        assert blocks[0].link_chars == len("link text")
        assert blocks[1].path == "/html/body/div/p"
        assert "hidden" not in visible_text(root)

    def test_parse_never_raises(self) -> None:
        for page in ["", "\x00\x01", "<?xml version='1.0' encoding='x'?><p>a</p>", "\ud800<p>x",
                     "<div>" * 50_000]:
            parse_html(page)

    def test_deep_nesting_is_walked_without_recursion(self) -> None:
        root = parse_html("<div>" * 5000 + "deep" + "</div>" * 5000)
        assert isinstance(text_blocks(root), list)

    def test_real_page_blocks_cover_visible_text(self, scrapinghub: Path) -> None:
        path = sorted((scrapinghub / "html").glob("*.html"))[0]
        root = parse_html(decode_html(path.read_bytes()))
        blocks = text_blocks(root)
        assert len(blocks) > 20
        gold = tokenize((scrapinghub / "content" / f"{path.stem}.txt").read_text("utf-8"))
        page = tokenize(visible_text(root))
        # The gold is the page's own text: nearly all of it is among the visible tokens.
        assert lcs_length(gold, page) > 0.9 * len(gold)


class TestAlignment:
    def test_lcs_and_mask(self) -> None:
        tokens = ["the", "cat", "sat", "on", "the", "mat"]
        gold = ["a", "cat", "sat", "on", "mat"]
        assert lcs_length(tokens, gold) == 4
        assert aligned_mask(tokens, gold) == [False, True, True, True, False, True]
        assert aligned_mask([], gold) == []
        assert aligned_mask(tokens, []) == [False] * 6


class TestContract:
    def test_unknown_request_keys_refused(self) -> None:
        with pytest.raises(ValidationError):
            ExtractRequest.model_validate({"html": "<p>x</p>", "bogus": 1})

    def test_extraction_text_defaults_to_content_blocks(self) -> None:
        blocks = [Block(text="a", is_content=True), Block(text="b", is_content=False),
                  Block(text="c", is_content=True)]
        assert Extraction(blocks).content_text() == "a\nc"
        assert Extraction(blocks, text="own").content_text() == "own"
