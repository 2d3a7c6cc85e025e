"""Edit sessions: the codespec-session v1 format, recording, synthesis and replay (docs/sessions.md)."""
