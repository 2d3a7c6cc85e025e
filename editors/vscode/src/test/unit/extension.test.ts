// The VS Code glue (extension.ts) against small fakes of the `vscode` API and of
// vscode-languageclient's LanguageClient (there is no VS Code to run it in here): commands, the
// client's launch options, the status bar, toggling, restarts on server settings, and streaming
// re-triggers through the inline-completion middleware.
import assert from "node:assert/strict";
import { after, beforeEach, test } from "node:test";
import Module = require("node:module");

const URI = "file:///w/a.py";
const STATS = {
  requests: 3,
  shown: 2,
  accepted: 1,
  acceptanceRate: 0.5,
  latencyMs: { count: 2, p50: 41.6, p90: 50, p99: 50 },
  engine: { loaded: true, model: "tiny" },
};

type Listener = (event: { affectsConfiguration(section: string): boolean }) => unknown;

const settingsValues: Record<string, unknown> = {};
const configListeners: Listener[] = [];
const commands = new Map<string, (...args: unknown[]) => unknown>();
const executed: string[] = [];
const messages: string[] = [];
const clients: FakeClient[] = [];
const statusItem = { text: "", tooltip: "" as unknown, command: "", show() {}, dispose() {} };

class Range {
  constructor(public start: unknown, public end: unknown) {}
}
class InlineCompletionItem {
  constructor(public insertText: string, public range?: Range) {}
}
class CancellationTokenSource {
  token = { isCancellationRequested: false };
  cancel() {
    this.token.isCancellationRequested = true;
  }
  dispose() {}
}

const fakeVscode = {
  StatusBarAlignment: { Left: 1, Right: 2 },
  ConfigurationTarget: { Global: 1 },
  Range,
  InlineCompletionItem,
  CancellationTokenSource,
  workspace: {
    getConfiguration: () => ({
      get: (key: string) => settingsValues[key],
      update: async (key: string, value: unknown) => {
        settingsValues[key] = value;
        const event = { affectsConfiguration: (s: string) => s === "codespec" || s === `codespec.${key}` };
        for (const listener of configListeners) await listener(event);
      },
    }),
    onDidChangeConfiguration: (listener: Listener) => {
      configListeners.push(listener);
      return { dispose() {} };
    },
  },
  window: {
    activeTextEditor: { document: { uri: { toString: () => URI } } },
    createOutputChannel: () => ({ info() {}, warn() {}, error() {}, appendLine() {}, show() {}, dispose() {} }),
    createStatusBarItem: () => statusItem,
    showErrorMessage: async (m: string) => void messages.push(m),  // (resolves undefined: no button chosen)
    showWarningMessage: async (m: string) => void messages.push(m),
    showInformationMessage: async (m: string) => void messages.push(m),
  },
  commands: {
    registerCommand: (name: string, fn: (...args: unknown[]) => unknown) => {
      commands.set(name, fn);
      return { dispose() {} };
    },
    executeCommand: async (name: string) => void executed.push(name),
  },
};

const State = { Stopped: 1, Running: 2, Starting: 3 };
const CloseAction = { DoNotRestart: 1, Restart: 2 };
const ErrorAction = { Continue: 1, Shutdown: 2 };
const RevealOutputChannelOn = { Debug: 0, Info: 1, Warn: 2, Error: 3, Never: 4 };
let failNextStart: Error | undefined;

type StateListener = (event: { oldState: number; newState: number }) => void;
interface ErrorHandler {
  error(error: Error, message: unknown, count: number | undefined): { action: number; handled?: boolean };
  closed(): { action: number; handled?: boolean };
}

class FakeClient {
  state = State.Stopped;
  notifications = new Map<string, (params: unknown) => void>();
  stateListeners: StateListener[] = [];
  stopped = false;
  constructor(
    public id: string,
    public name: string,
    public serverOptions: { command: string; args: string[] },
    public clientOptions: {
      initializationOptions: Record<string, unknown>;
      middleware: { provideInlineCompletionItems: (...args: unknown[]) => unknown };
      errorHandler: ErrorHandler;
    },
  ) {
    clients.push(this);
  }
  onNotification(method: string, handler: (params: unknown) => void) {
    this.notifications.set(method, handler);
    return { dispose() {} };
  }
  onDidChangeState(listener: StateListener) {
    this.stateListeners.push(listener);
    return { dispose() {} };
  }
  setState(newState: number) {
    const oldState = this.state;
    this.state = newState;
    for (const listener of this.stateListeners) listener({ oldState, newState });
  }
  async start() {
    this.setState(State.Starting);
    const failure = failNextStart;
    failNextStart = undefined;
    if (failure) {
      this.setState(State.Stopped);
      throw failure;
    }
    this.setState(State.Running);
  }
  async stop() {
    this.stopped = true;
    this.state = State.Stopped;
  }
  async sendRequest(method: string) {
    assert.equal(method, "codespec/stats");
    return STATS;
  }
}

// Serve the fakes to extension.ts's `require("vscode")` and `require("vscode-languageclient/node")`.
const moduleWithLoad = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
const originalLoad = moduleWithLoad._load;
moduleWithLoad._load = function (request: string, ...rest: unknown[]) {
  if (request === "vscode") return fakeVscode;
  if (request === "vscode-languageclient/node") {
    return { LanguageClient: FakeClient, State, CloseAction, ErrorAction, RevealOutputChannelOn };
  }
  return originalLoad.call(this, request, ...rest);
};
const extension = require("../../extension") as typeof import("../../extension");

function latestClient(): FakeClient {
  return clients[clients.length - 1];
}

function provide(position = { line: 1, character: 4 }, version = 3, next?: (...args: unknown[]) => unknown) {
  const document = { uri: { toString: () => URI }, version };
  const token = new CancellationTokenSource().token;
  const calls: unknown[][] = [];
  const nextFn = next ?? ((...args: unknown[]) => (calls.push(args), Promise.resolve([])));
  const result = latestClient().clientOptions.middleware.provideInlineCompletionItems(
    document,
    position,
    { triggerKind: 1 },
    token,
    nextFn,
  );
  return { result, calls };
}

let activated = false;
const subscriptions: { dispose(): unknown }[] = [];
beforeEach(async () => {
  if (!activated) {
    settingsValues["server.path"] = "/venv/bin/codespec";
    settingsValues.model = "tiny";
    await extension.activate({ subscriptions } as never);
    activated = true;
  }
});
after(() => {
  for (const subscription of subscriptions) subscription.dispose(); // the stats timer among them
});

test("activate: commands, launch options and the status bar from codespec/stats", () => {
  assert.deepEqual([...commands.keys()].sort(), ["codespec.restart", "codespec.showStats", "codespec.toggle"]);
  const client = latestClient();
  assert.deepEqual(client.serverOptions.command, "/venv/bin/codespec");
  assert.deepEqual(client.serverOptions.args, ["serve", "--stdio"]);
  assert.deepEqual(client.clientOptions.initializationOptions, { streaming: false, model: "tiny" });
  assert.equal(client.state, State.Running);
  assert.equal(statusItem.text, "$(sparkle) 42 ms · 50%");
  assert.match(String(statusItem.tooltip), /acceptance 50% \(1 accepted of 2 shown/);
  assert.equal(statusItem.command, "codespec.showStats");
});

test("without streaming the middleware passes VS Code's request through", async () => {
  const { result, calls } = provide();
  assert.deepEqual(await result, []);
  assert.equal(calls.length, 1);
});

test("a failed request shows nothing and is said once", async () => {
  messages.length = 0;
  const failing = () => Promise.reject(new Error("items is not iterable"));
  assert.equal(await provide(undefined, 3, failing).result, null);
  assert.equal(await provide(undefined, 3, failing).result, null);
  assert.equal(messages.length, 1, messages.join("\n"));
  assert.match(messages[0], /a suggestion request failed \(its answer is not an inline completion: items is not iterable\)/);
});

test("toggle turns suggestions off (no request) and on again", async () => {
  await commands.get("codespec.toggle")!();
  assert.equal(settingsValues.enabled, false);
  const off = provide();
  assert.equal(off.result, null);
  assert.equal(off.calls.length, 0);
  assert.equal(statusItem.text, "$(circle-slash) codespec");
  assert.equal(latestClient().stopped, false, "toggling does not restart the server");
  await commands.get("codespec.toggle")!();
  assert.equal(provide().calls.length, 1);
});

test("a server setting restarts the client with the new options", async () => {
  const before = latestClient();
  await fakeVscode.workspace.getConfiguration().update("streaming", true);
  assert.equal(before.stopped, true);
  assert.notEqual(latestClient(), before);
  assert.deepEqual(latestClient().clientOptions.initializationOptions, { streaming: true, model: "tiny" });
});

test("streaming: partials re-trigger the editor and are answered without a new request", async () => {
  let resolveFinal!: (value: unknown) => void;
  const sent: unknown[][] = [];
  const next = (...args: unknown[]) => {
    sent.push(args);
    return new Promise((resolve) => (resolveFinal = resolve));
  };
  const position = { line: 1, character: 4 };
  const first = provide(position, 3, next);
  assert.equal(sent.length, 1);
  const partial = latestClient().notifications.get("codespec/partialCompletion")!;
  executed.length = 0;
  partial({ uri: URI, version: 3, position, text: "return", done: false });
  assert.deepEqual(executed, ["editor.action.inlineSuggest.trigger"]);
  partial({ uri: URI, version: 2, position, text: "stale", done: false });
  partial({ uri: "file:///other.py", version: 3, position, text: "x", done: false });
  assert.equal(executed.length, 1, "other versions and documents do not re-trigger");

  const again = provide(position, 3, next);
  const items = (await again.result) as InlineCompletionItem[];
  assert.equal(items.length, 1);
  assert.equal(items[0].insertText, "return");
  assert.equal(sent.length, 1, "the re-trigger shares the running request");
  // VS Code's token for the first call may be cancelled; ours (passed to the request) is not.
  const ownToken = sent[0][3] as { isCancellationRequested: boolean };
  assert.equal(ownToken.isCancellationRequested, false);

  const final = [new InlineCompletionItem("return radius", new Range(position, position))];
  resolveFinal(final);
  assert.equal(await first.result, final);
  partial({ uri: URI, version: 3, position, text: "return radius", done: true });
  assert.equal(executed.length, 2);
  assert.equal(await provide(position, 3, next).result, final);

  // Typing on: another place cancels the running request for the old one.
  provide({ line: 1, character: 5 }, 4, next);
  provide({ line: 1, character: 6 }, 5, next);
  assert.equal(sent.length, 3);
  assert.equal((sent[1][3] as { isCancellationRequested: boolean }).isCancellationRequested, true);
});

test("a crash of a running server is said once and the server restarted; a failed restart is said once", async () => {
  const client = latestClient();
  messages.length = 0;
  const decision = client.clientOptions.errorHandler.closed(); // the server died while running
  assert.deepEqual(decision, { action: CloseAction.Restart, handled: true });
  assert.equal(messages.length, 1);
  assert.match(messages[0], /stopped unexpectedly and is being restarted/);
  // The language client restarts it; this time it exits during start-up.
  client.setState(State.Stopped);
  client.setState(State.Starting);
  assert.deepEqual(client.clientOptions.errorHandler.closed(), { action: CloseAction.DoNotRestart, handled: true });
  client.setState(State.Stopped);
  assert.equal(messages.length, 2, messages.join("\n"));
  assert.match(messages[1], /could not be started again/);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(statusItem.text, "$(error) codespec: not running");
  // Restart Server brings it back.
  await commands.get("codespec.restart")!();
  assert.equal(latestClient().state, State.Running);
  assert.equal(statusItem.text, "$(sparkle) 42 ms · 50%");
  assert.equal(messages.length, 2);
});

test("malformed messages: said once, the server stopped after several in a row", () => {
  const handler = latestClient().clientOptions.errorHandler;
  messages.length = 0;
  assert.equal(handler.error(new Error("bad"), undefined, 1).action, ErrorAction.Continue);
  assert.equal(handler.error(new Error("bad"), undefined, 2).action, ErrorAction.Continue);
  assert.equal(messages.length, 1);
  assert.match(messages[0], /malformed message/);
  assert.equal(handler.error(new Error("bad"), undefined, 4).action, ErrorAction.Shutdown);
  assert.equal(messages.length, 2);
});

test("a server that cannot start: one message naming the path and the setting", async () => {
  messages.length = 0;
  failNextStart = new Error("Launching server using command /nope failed. Error: spawn /nope ENOENT");
  await commands.get("codespec.restart")!();
  assert.equal(messages.length, 1, messages.join("\n"));
  assert.match(messages[0], /could not start the server `\/venv\/bin\/codespec` \(no such file\)/);
  assert.match(messages[0], /codespec\.server\.path/);
  assert.equal(statusItem.text, "$(error) codespec: not running");
  await commands.get("codespec.restart")!();
  assert.equal(latestClient().state, State.Running);
});

test("show stats reports the summary; deactivate stops the client", async () => {
  await commands.get("codespec.showStats")!();
  assert.ok(messages.some((m) => m.startsWith("latency p50 42 ms")), messages.join("\n"));
  const client = latestClient();
  await extension.deactivate();
  assert.equal(client.stopped, true);
});
