"""The decode core: the speculative loop (engine), its drafters, sampling, the runtimes under it, the remote backend.

Imports point one way, bottom to top: `api` (the engine interface and its result types, torch-free) <-
`runtimes` (a target's forward over k tokens with a cache it can cut; the KV helpers) <- `sampling` <-
`drafters` and `eagle` (cheap drafts) <- `engine` (draft, verify in one forward, accept). `remote` implements
the same interface over HTTP and imports `api` only, so the thin client needs neither torch nor transformers.
Nothing here imports from the floors above (models, context, the server)."""
