import assert from "node:assert/strict";
import { test } from "node:test";

import { isPartialCompletion, PartialCompletion, placeKey, StreamingRequests } from "../../streaming";

const URI = "file:///a.py";
const AT = { line: 3, character: 8 };

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** A fake request starter that records starts and cancels. */
function harness() {
  const started: string[] = [];
  const cancelled: string[] = [];
  const answers = new Map<string, ReturnType<typeof deferred<string>>>();
  const streaming = new StreamingRequests<string>();
  const requests = {
    provide: (key: string) =>
      streaming.provide(key, () => {
        started.push(key);
        const answer = deferred<string>();
        answers.set(key, answer);
        return { promise: answer.promise, cancel: () => cancelled.push(key) };
      }),
    onPartial: (p: PartialCompletion) => streaming.onPartial(p),
    cancel: () => streaming.cancel(),
    get runningKey() {
      return streaming.runningKey;
    },
  };
  return { requests, started, cancelled, answers };
}

function partial(text: string, done = false, version = 7, position = AT): PartialCompletion {
  return { uri: URI, version, position, text, done };
}

test("a re-trigger at the same place shares the request and answers with the text so far", async () => {
  const { requests, started, cancelled, answers } = harness();
  const key = placeKey(URI, 7, AT);
  const first = requests.provide(key);
  assert.ok("result" in first);
  assert.equal(requests.onPartial(partial("def")), true);
  assert.deepEqual(requests.provide(key), { partial: "def" });
  assert.equal(requests.onPartial(partial("def")), false, "the same text needs no re-trigger");
  assert.equal(requests.onPartial(partial("def add(")), true);
  assert.deepEqual(requests.provide(key), { partial: "def add(" });
  assert.deepEqual(started, [key]);

  answers.get(key)!.resolve("def add(a, b):");
  assert.equal(await (first as { result: Promise<string> }).result, "def add(a, b):");
  assert.equal(requests.onPartial(partial("def add(a, b):", true)), true, "done: show the final answer");
  const final = requests.provide(key);
  assert.ok("result" in final);
  assert.equal(await final.result, "def add(a, b):");
  assert.deepEqual(started, [key]);
  assert.deepEqual(cancelled, []);
});

test("another place cancels the running request and starts a new one", () => {
  const { requests, started, cancelled } = harness();
  const first = placeKey(URI, 7, AT);
  const second = placeKey(URI, 8, { line: 3, character: 9 });
  requests.provide(first);
  requests.provide(second);
  assert.deepEqual(started, [first, second]);
  assert.deepEqual(cancelled, [first]);
  assert.equal(requests.runningKey, second);
  // A late partial for the cancelled place is not shown.
  assert.equal(requests.onPartial(partial("x")), false);
});

test("partials for other versions or positions are ignored; a settled request is not cancelled", async () => {
  const { requests, cancelled, answers } = harness();
  const key = placeKey(URI, 7, AT);
  requests.provide(key);
  assert.equal(requests.onPartial(partial("x", false, 6)), false);
  assert.equal(requests.onPartial(partial("x", false, 7, { line: 3, character: 7 })), false);
  answers.get(key)!.resolve("done");
  await new Promise((r) => setImmediate(r));
  assert.equal(requests.runningKey, undefined);
  requests.cancel();
  assert.deepEqual(cancelled, []);
});

test("isPartialCompletion checks the notification's shape", () => {
  assert.equal(isPartialCompletion(partial("x")), true);
  assert.equal(isPartialCompletion({ ...partial("x"), version: "7" }), false);
  assert.equal(isPartialCompletion({ uri: URI, text: "x", done: false }), false);
  assert.equal(isPartialCompletion(null), false);
});
