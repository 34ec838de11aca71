"""The algorithm services: one folder each, a pure extractor.py plus a thin app.py."""
