"""Reliability and security drivers for the real `codespec serve --stdio` process: a raw JSON-RPC
client (`rpc`), a test-only launcher with fault injection and an audit log (`launch`), the
byte-level and edit-sequence fuzzers (`fuzz`, `edits`), the load soak (`soak`) and process probes
(`procinfo`). Figures and commands: docs/reliability.md."""
