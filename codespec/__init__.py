"""codespec: a fast, lossless speculative-decoding code-completion backend."""

__version__ = "0.1.0"
