"""A fuzzer over the project's own tiny GGUF files (see run.py)."""
