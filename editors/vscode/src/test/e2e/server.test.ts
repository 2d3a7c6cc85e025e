// End to end: the real `codespec serve --stdio` (tiny random model, so no weights are needed) driven
// over stdio by vscode-languageserver-protocol, the protocol stack VS Code's language client uses.
//
// The server command: $CODESPEC_SERVER_CMD (a JSON list), else the checkout's .venv/bin/codespec,
// else `$CODESPEC_PYTHON -m codespec.cli`, else `codespec` on PATH, with the tiny model's flags.
import assert from "node:assert/strict";
import { ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";

import {
  CancellationTokenSource,
  createProtocolConnection,
  DidChangeTextDocumentNotification,
  DidOpenTextDocumentNotification,
  ExecuteCommandRequest,
  ExitNotification,
  InitializedNotification,
  InitializeRequest,
  InitializeResult,
  InlineCompletionList,
  InlineCompletionRequest,
  InlineCompletionTriggerKind,
  LSPErrorCodes,
  ProtocolConnection,
  ResponseError,
  ShutdownRequest,
  StreamMessageReader,
  StreamMessageWriter,
} from "vscode-languageserver-protocol/node";

import { initializationOptions, readSettings } from "../../config";
import { ServerStats, STATS_METHOD, statusText } from "../../stats";
import { isPartialCompletion, PARTIAL_METHOD, PartialCompletion } from "../../streaming";

const REPO = path.resolve(__dirname, "../../../../..");
// A small simulated model delay keeps a generation running long enough to be cancelled mid-way.
const TINY_FLAGS = ["--model", "tiny", "--draft-model", "none", "--drafting", "lookup", "--step-delay", "0.01"];
const URI = "file:///tmp/codespec-e2e/example.py";
const REQUEST_TIMEOUT_MS = 60_000;

function serverCommand(): string[] {
  if (process.env.CODESPEC_SERVER_CMD) return JSON.parse(process.env.CODESPEC_SERVER_CMD) as string[];
  const args = ["serve", "--stdio", ...TINY_FLAGS];
  const venv = path.join(REPO, ".venv", "bin", "codespec");
  if (existsSync(venv)) return [venv, ...args];
  if (process.env.CODESPEC_PYTHON) return [process.env.CODESPEC_PYTHON, "-m", "codespec.cli", ...args];
  return ["codespec", ...args];
}

let server: ChildProcess;
let connection: ProtocolConnection;
let initializeResult: InitializeResult;
let stderr = "";
const partials: PartialCompletion[] = [];
let version = 1;
let text = "";

function withTimeout<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out: ${what}\nserver stderr:\n${stderr.slice(-3000)}`)), REQUEST_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Type `typed` at the end of the document, one incremental didChange per character, as an editor does. */
function typeAtEnd(typed: string): { line: number; character: number } {
  for (const ch of typed) {
    const lines = text.split("\n");
    const at = { line: lines.length - 1, character: lines[lines.length - 1].length };
    text += ch;
    version += 1;
    void connection.sendNotification(DidChangeTextDocumentNotification.type, {
      textDocument: { uri: URI, version },
      contentChanges: [{ range: { start: at, end: at }, text: ch }],
    });
  }
  const lines = text.split("\n");
  return { line: lines.length - 1, character: lines[lines.length - 1].length };
}

function inlineCompletion(position: { line: number; character: number }, token?: CancellationTokenSource) {
  return connection.sendRequest(
    InlineCompletionRequest.type,
    {
      textDocument: { uri: URI },
      position,
      context: { triggerKind: InlineCompletionTriggerKind.Invoked },
    },
    token?.token,
  );
}

function stats(): Promise<ServerStats> {
  return withTimeout(connection.sendRequest<ServerStats>(STATS_METHOD, {}), "codespec/stats");
}

before(async () => {
  const [command, ...args] = serverCommand();
  server = spawn(command, args, {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, OMP_NUM_THREADS: "1", TOKENIZERS_PARALLELISM: "false" },
  });
  server.stderr!.on("data", (chunk) => (stderr += chunk.toString()));
  connection = createProtocolConnection(new StreamMessageReader(server.stdout!), new StreamMessageWriter(server.stdin!));
  connection.onNotification(PARTIAL_METHOD, (params: unknown) => {
    if (isPartialCompletion(params)) partials.push(params);
  });
  connection.listen();
  // What the extension sends with default settings and streaming on; short suggestions keep it quick.
  const settings = readSettings((key) => (key === "streaming" ? true : undefined));
  initializeResult = await withTimeout(
    connection.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      rootUri: null,
      capabilities: { general: { positionEncodings: ["utf-16"] }, textDocument: { inlineCompletion: {} } },
      initializationOptions: { ...initializationOptions(settings), maxTokens: 32 },
    }),
    "initialize",
  );
  await connection.sendNotification(InitializedNotification.type, {});
  text = "import math\n\n\ndef area(radius):\n    ";
  await connection.sendNotification(DidOpenTextDocumentNotification.type, {
    textDocument: { uri: URI, languageId: "python", version, text },
  });
});

after(async () => {
  try {
    await withTimeout(connection.sendRequest(ShutdownRequest.type), "shutdown");
    await connection.sendNotification(ExitNotification.type);
  } finally {
    const exited = new Promise<number | null>((resolve) => server.once("exit", (code) => resolve(code)));
    const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r("still running"), 10_000))]);
    if (code === "still running") server.kill("SIGKILL");
    connection.dispose();
    assert.equal(code, 0, `server exit code\n${stderr.slice(-2000)}`);
  }
});

test("initialize: inline completion, the accept command and utf-16 positions", () => {
  const capabilities = initializeResult.capabilities;
  assert.ok(capabilities.inlineCompletionProvider, "inlineCompletionProvider");
  assert.ok(capabilities.executeCommandProvider?.commands.includes("codespec.accept"));
  assert.equal(capabilities.positionEncoding ?? "utf-16", "utf-16");
});

let accepted: { insertText: string; arguments: unknown[] } | undefined;

test("open, change, inline completion: one item at the cursor with the accept command", async () => {
  const position = typeAtEnd("return math.");
  const result = (await withTimeout(inlineCompletion(position), "inlineCompletion")) as InlineCompletionList;
  assert.ok(result && Array.isArray(result.items), `an InlineCompletionList, got ${JSON.stringify(result)}`);
  assert.equal(result.items.length, 1, `one suggestion for a random model at this place: ${JSON.stringify(result)}`);
  const [item] = result.items;
  assert.equal(typeof item.insertText, "string");
  assert.notEqual(item.insertText, "");
  assert.deepEqual(item.range, { start: position, end: position });
  assert.equal(item.command?.command, "codespec.accept");
  accepted = { insertText: item.insertText as string, arguments: item.command!.arguments ?? [] };

  // Streaming: the partial texts for this place grow towards the answer.
  const here = partials.filter((p) => p.position.line === position.line && p.position.character === position.character);
  assert.ok(here.length > 0, "codespec/partialCompletion notifications");
  for (const p of here) {
    assert.equal(p.uri, URI);
    assert.equal(p.version, version);
  }
  const final = here.filter((p) => p.done).pop() ?? here[here.length - 1];
  assert.ok(final.text.startsWith(accepted.insertText) || accepted.insertText.startsWith(final.text));
});

test("the accept command reaches the server's acceptance count", async () => {
  assert.ok(accepted, "needs the previous test's item");
  const before = await stats();
  const reply = await withTimeout(
    connection.sendRequest(ExecuteCommandRequest.type, { command: "codespec.accept", arguments: accepted.arguments }),
    "executeCommand",
  );
  assert.deepEqual(reply, { known: true });
  const now = await stats();
  assert.equal(now.accepted, (before.accepted ?? 0) + 1);
  assert.ok(typeof now.acceptanceRate === "number" && now.acceptanceRate > 0);
  assert.ok(typeof now.latencyMs?.p50 === "number");
  assert.match(statusText(now, true), /^\$\(sparkle\) \d+ ms · \d+%$/);
});

test("cancel: a cancelled request is answered RequestCancelled (or dropped as stale) and counted", async () => {
  const before = await stats();
  const position = typeAtEnd("\n    total = radius * radius\n    ");
  const source = new CancellationTokenSource();
  const pending = inlineCompletion(position, source);
  source.cancel();
  let outcome: string;
  try {
    const result = await withTimeout(pending, "cancelled inlineCompletion");
    outcome = result === null ? "null" : `result ${JSON.stringify(result)}`;
  } catch (error) {
    assert.ok(error instanceof ResponseError, String(error));
    outcome = error.code === LSPErrorCodes.RequestCancelled ? "cancelled" : `error ${error.code}`;
  }
  assert.ok(outcome === "cancelled" || outcome === "null", `cancel outcome: ${outcome}`);
  const now = await stats();
  assert.equal(
    (now.cancelled ?? 0) + (now.superseded ?? 0),
    (before.cancelled ?? 0) + (before.superseded ?? 0) + 1,
    JSON.stringify(now),
  );
  // The server keeps serving: the next request at the same place is answered.
  const again = (await withTimeout(inlineCompletion(position), "inlineCompletion after cancel")) as InlineCompletionList;
  assert.ok(again && Array.isArray(again.items));
});
