import assert from "node:assert/strict";
import { test } from "node:test";

import { failedAnswerMessage, MAX_RESTARTS, RESTART_WINDOW_MS, ServerWatch, startFailureMessage } from "../../lifecycle";

test("a running server that stops is restarted, with one message per stop, up to MAX_RESTARTS in the window", () => {
  let now = 0;
  const watch = new ServerWatch(() => now);
  for (let i = 0; i < MAX_RESTARTS; i++) {
    const decision = watch.closed(true);
    assert.equal(decision.restart, true);
    assert.match(decision.message ?? "", /stopped unexpectedly and is being restarted/);
    now += 1000;
  }
  const last = watch.closed(true);
  assert.equal(last.restart, false);
  assert.match(last.message ?? "", /stopped 5 times within 3 minutes/);
  now += RESTART_WINDOW_MS + 1; // old stops leave the window
  assert.equal(watch.closed(true).restart, true);
});

test("a server that never ran is not restarted and not reported here (the start reports it)", () => {
  assert.deepEqual(new ServerWatch().closed(false), { restart: false });
});

test("malformed messages: reported once, shut down after too many in a row", () => {
  const watch = new ServerWatch();
  assert.match(watch.connectionError(1).message ?? "", /malformed message/);
  assert.deepEqual(watch.connectionError(2), { shutdown: false });
  assert.equal(watch.connectionError(3).shutdown, false);
  assert.equal(watch.connectionError(4).shutdown, true);
  assert.equal(watch.once("a failed answer"), undefined, "one message about the server's trouble");
  assert.equal(new ServerWatch().once("a failed answer"), "a failed answer");
});

test("start failures in words", () => {
  const enoent = startFailureMessage("/x/codespec", new Error("spawn /x/codespec ENOENT"));
  assert.match(enoent, /could not start the server `\/x\/codespec` \(no such file\)/);
  assert.match(enoent, /"codespec.server.path"/);
  assert.match(startFailureMessage("p", new Error("Pending response rejected since connection got disposed")),
    /\(it exited during start-up\)/);
  assert.match(startFailureMessage("p", new Error("EACCES")), /\(not executable\)/);
});

test("failed requests in words: the server's error, or an answer that is no inline completion", () => {
  const serverError = Object.assign(new Error("model failed"), { code: -32603 });
  assert.match(failedAnswerMessage(serverError), /\(the server answered error -32603: model failed\)/);
  assert.match(failedAnswerMessage(new TypeError("x is undefined")), /\(its answer is not an inline completion: x is undefined\)/);
});
