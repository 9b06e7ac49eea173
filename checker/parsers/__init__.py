"""Pure parsers: raw tool output in, report models out. No I/O, never raise on garbage."""
