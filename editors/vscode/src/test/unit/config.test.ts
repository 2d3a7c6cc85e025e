import assert from "node:assert/strict";
import { test } from "node:test";

import { DEFAULT_SETTINGS, initializationOptions, readSettings, serverLaunch } from "../../config";

function settingsFrom(values: Record<string, unknown>) {
  return readSettings((key) => values[key]);
}

test("defaults launch `codespec serve --stdio` and send only streaming", () => {
  const settings = settingsFrom({});
  assert.deepEqual(settings, DEFAULT_SETTINGS);
  assert.deepEqual(serverLaunch(settings), { command: "codespec", args: ["serve", "--stdio"] });
  assert.deepEqual(initializationOptions(settings), { streaming: false });
});

test("model, draft, drafting and device map to the server's option names", () => {
  const settings = settingsFrom({
    "server.path": " /opt/venv/bin/codespec ",
    "server.args": ["serve", "--stdio", "--threads", "4"],
    model: "bundled:qwen2.5-coder-1.5b",
    draftModel: "bundled:qwen2.5-coder-0.5b",
    drafting: "both",
    device: "cuda",
    engine: "http://gpu-box:8000",
    engineModel: "Qwen/Qwen2.5-Coder-7B",
    streaming: true,
  });
  assert.deepEqual(serverLaunch(settings), {
    command: "/opt/venv/bin/codespec",
    args: ["serve", "--stdio", "--threads", "4"],
  });
  assert.deepEqual(initializationOptions(settings), {
    streaming: true,
    model: "bundled:qwen2.5-coder-1.5b",
    draftModel: "bundled:qwen2.5-coder-0.5b",
    drafting: "both",
    device: "cuda",
    engine: "http://gpu-box:8000",
    engineModel: "Qwen/Qwen2.5-Coder-7B",
  });
});

test("values of the wrong type fall back to the defaults", () => {
  const settings = settingsFrom({
    "server.path": "",
    "server.args": ["serve", 3],
    drafting: "sometimes",
    streaming: "yes",
    enabled: 0,
    statsIntervalSeconds: 0,
  });
  assert.equal(settings.serverPath, "codespec");
  assert.deepEqual(settings.serverArgs, ["serve", "--stdio"]);
  assert.equal(settings.drafting, "");
  assert.equal(settings.streaming, false);
  assert.equal(settings.enabled, true);
  assert.equal(settings.statsIntervalSeconds, 5);
  assert.equal("drafting" in initializationOptions(settings), false);
});

test("the returned args are a copy, not the settings' array", () => {
  const args = ["serve", "--stdio"];
  const settings = settingsFrom({ "server.args": args });
  serverLaunch(settings).args.push("--tcp");
  assert.deepEqual(args, ["serve", "--stdio"]);
  assert.deepEqual(settings.serverArgs, ["serve", "--stdio"]);
});

test("the deprecated codespec.draft still names the draft model", () => {
  assert.equal(settingsFrom({ draft: "bundled:qwen2.5-coder-0.5b" }).draftModel, "bundled:qwen2.5-coder-0.5b");
  assert.equal(settingsFrom({ draft: "old", draftModel: "new" }).draftModel, "new");
});
