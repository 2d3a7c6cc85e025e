import assert from "node:assert/strict";
import { test } from "node:test";

import { statsSummary, statusText } from "../../stats";

const stats = {
  requests: 12,
  answered: 8,
  cancelled: 3,
  superseded: 1,
  shown: 8,
  accepted: 5,
  rejected: 3,
  acceptanceRate: 0.625,
  latencyMs: { count: 8, p50: 41.6, p90: 88.2, p99: 120.9 },
  generations: { tau: 2.345 },
  engine: { loaded: true, model: "bundled:qwen2.5-coder-1.5b", draftModel: "bundled:qwen2.5-coder-0.5b" },
};

test("status bar: p50 latency and acceptance", () => {
  assert.equal(statusText(stats, true), "$(sparkle) 42 ms · 63%");
});

test("status bar: off, starting, loading, no answers yet", () => {
  assert.equal(statusText(stats, false), "$(circle-slash) codespec");
  assert.equal(statusText(undefined, true), "$(sync~spin) codespec");
  assert.equal(statusText(undefined, true, true), "$(error) codespec: not running");
  assert.equal(statusText({ engine: { loaded: false } }, true), "$(loading~spin) codespec: loading model");
  assert.equal(statusText({ latencyMs: { count: 0, p50: null } }, true), "$(sparkle) codespec");
  assert.equal(statusText({ latencyMs: { p50: 10 }, acceptanceRate: null }, true), "$(sparkle) 10 ms · –");
});

test("summary lines", () => {
  assert.deepEqual(statsSummary(stats), [
    "latency p50 42 ms · p90 88 ms · p99 121 ms (8 answers)",
    "acceptance 63% (5 accepted of 8 shown, 3 rejected)",
    "requests 12: 8 answered, 3 cancelled, 1 superseded",
    "tau 2.35 tokens per target forward",
    "model bundled:qwen2.5-coder-1.5b, draft bundled:qwen2.5-coder-0.5b (loaded)",
  ]);
  assert.deepEqual(statsSummary({}), [
    "latency p50 – · p90 – · p99 – (0 answers)",
    "acceptance – (0 accepted of 0 shown, 0 rejected)",
    "requests 0: 0 answered, 0 cancelled, 0 superseded",
  ]);
});
