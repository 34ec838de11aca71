"""What every boilerbench service and the orchestrator share: the /extract contract,
page decoding, HTML parsing, the scoring tokenizer and the service kit."""
