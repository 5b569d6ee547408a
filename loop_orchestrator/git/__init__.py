"""The one git gateway, parsing git's output, the refs book, temporary checkouts, secret-looking files."""
