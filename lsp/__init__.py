"""The pygls language server: the only package that speaks LSP."""
