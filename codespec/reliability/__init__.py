"""Reliability and security drivers that test the real `codespec serve --stdio` process from outside.

They are a raw JSON-RPC client (`rpc`), a test-only launcher with fault injection and an audit log (`launch`),
the byte-level and edit-sequence fuzzers (`fuzz`, `edits`), the load soak (`soak`) and process probes
(`procinfo`). Figures and commands: docs/reliability.md."""
