"""What bakery reports across many bakes, and in which formats: the release matrix's rows
(from a run, or read back from JSON reports) and their JSON, Markdown and JUnit forms."""
