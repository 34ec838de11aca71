"""The orchestrator: test sets in, every service scored, figures and a report out."""
