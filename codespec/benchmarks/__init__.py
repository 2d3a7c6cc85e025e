"""The benchmarks behind `codespec bench NAME`, one module per benchmark, and what their reports share.

One module each ([docs/benchmarks.md](../../docs/benchmarks.md)): generate, context, layout, humaneval, replay
(with load: `bench replay --parallel`); `bench distill` lives with the distillation (codespec/distill/cli.py).
The command and its table are in codespec/benchmarks/cli.py; what their reports share is in
codespec/benchmarks/report.py."""
