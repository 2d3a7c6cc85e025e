// VS Code glue: the language client (inline completion is built into vscode-languageclient 11),
// the status bar, the commands, and streaming re-triggers. The logic lives in config.ts, stats.ts
// and streaming.ts, which do not import `vscode`.
import * as vscode from "vscode";
import {
  CloseAction,
  ErrorAction,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
} from "vscode-languageclient/node";

import { CodespecSettings, initializationOptions, readSettings, SERVER_SETTINGS, serverLaunch } from "./config";
import { failedAnswerMessage, RESTART_FAILED_MESSAGE, ServerWatch, startFailureMessage } from "./lifecycle";
import { ServerStats, STATS_METHOD, statsSummary, statusText } from "./stats";
import { isPartialCompletion, PARTIAL_METHOD, placeKey, StreamingRequests } from "./streaming";

type InlineResult = vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined;

let client: LanguageClient | undefined;
let settings: CodespecSettings;
let statusItem: vscode.StatusBarItem;
let statsTimer: NodeJS.Timeout | undefined;
let lastStats: ServerStats | undefined;
let output: vscode.LogOutputChannel;
let streaming: StreamingRequests<InlineResult> | undefined;
let serverFailed = false; // not running, and not about to be: the status bar says so
let watch = new ServerWatch(); // the current client's

/** The language client, whose own error pop-ups become output-channel lines: the extension says what went
 * wrong itself, once per failure (lifecycle.ts), instead of the client's several messages per failure. */
class CodespecClient extends LanguageClient {
  override error(message: string, data?: unknown, _showNotification?: boolean | "force"): void {
    super.error(message, data, false);
  }
}

function report(message: string): void {
  output.error(message);
  void vscode.window.showErrorMessage(message, "Show Output").then((choice) => choice && output.show(true));
}

function currentSettings(): CodespecSettings {
  const section = vscode.workspace.getConfiguration("codespec");
  return readSettings((key) => section.get(key));
}

function provideInline(
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  token: vscode.CancellationToken,
  next: (
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
  ) => vscode.ProviderResult<InlineResult>,
): vscode.ProviderResult<InlineResult> {
  if (!settings.enabled) return null;
  if (!settings.streaming) return guard(next(document, position, context, token));
  streaming ??= new StreamingRequests<InlineResult>();
  const answer = streaming.provide(placeKey(document.uri.toString(), document.version, position), () => {
    // Our own cancellation: a re-trigger must not cancel the generation it is streaming.
    const source = new vscode.CancellationTokenSource();
    const promise = guard(next(document, position, context, source.token)).finally(() => source.dispose());
    return { promise, cancel: () => source.cancel() };
  });
  if ("partial" in answer) {
    return [new vscode.InlineCompletionItem(answer.partial, new vscode.Range(position, position))];
  }
  return answer.result;
}

/** A request that failed (the server's error, or an answer that is no inline completion) shows nothing: said
 * once, logged every time, never thrown into VS Code (which would log it as the provider failing). */
function guard(result: vscode.ProviderResult<InlineResult>): Promise<InlineResult> {
  return Promise.resolve(result).catch((error: unknown) => {
    output.warn(`inline completion failed: ${error instanceof Error ? error.message : String(error)}`);
    const message = watch.once(failedAnswerMessage(error));
    if (message) report(message);
    return null;
  });
}

function createClient(): LanguageClient {
  const launch = serverLaunch(settings);
  const serverOptions: ServerOptions = { command: launch.command, args: launch.args, options: { env: process.env } };
  watch = new ServerWatch();
  // A restart the client makes after a crash: "pending" until it starts, then "starting" until it runs.
  let restart: "none" | "pending" | "starting" = "none";
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    initializationOptions: initializationOptions(settings),
    outputChannel: output,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    initializationFailedHandler: () => false, // no retry loop: startClient reports the failure
    middleware: { provideInlineCompletionItems: provideInline },
    errorHandler: {
      error: (_error, _message, count) => {
        const decision = watch.connectionError(count);
        if (decision.message) report(decision.message);
        if (decision.shutdown) serverFailed = true;
        return { action: decision.shutdown ? ErrorAction.Shutdown : ErrorAction.Continue, handled: true };
      },
      closed: () => {
        const decision = watch.closed(created.state === State.Running);
        if (decision.message) report(decision.message);
        if (decision.restart) restart = "pending";
        else serverFailed = true;
        return { action: decision.restart ? CloseAction.Restart : CloseAction.DoNotRestart, handled: true };
      },
    },
  };
  const created = new CodespecClient("codespec", "codespec", serverOptions, clientOptions);
  created.onDidChangeState((event) => {
    if (event.newState === State.Running) {
      restart = "none";
      serverFailed = false;
    } else if (event.newState === State.Starting && restart === "pending") {
      restart = "starting";
    } else if (event.newState === State.Stopped && restart === "starting") {
      restart = "none";
      serverFailed = true;
      report(RESTART_FAILED_MESSAGE);
    }
    void refreshStats();
  });
  return created;
}

async function refreshStats(): Promise<void> {
  if (!client || client.state !== State.Running) {
    lastStats = undefined;
  } else {
    try {
      lastStats = await client.sendRequest<ServerStats>(STATS_METHOD, {});
    } catch {
      lastStats = undefined;
    }
  }
  statusItem.text = statusText(lastStats, settings.enabled, serverFailed);
  statusItem.tooltip = lastStats
    ? statsSummary(lastStats).join("\n")
    : serverFailed
      ? "codespec: the server is not running (see the codespec output channel)"
      : "codespec: starting";
}

function scheduleStats(): void {
  if (statsTimer) clearInterval(statsTimer);
  statsTimer = setInterval(() => void refreshStats(), settings.statsIntervalSeconds * 1000);
}

function onPartial(params: unknown): void {
  if (!streaming || !isPartialCompletion(params)) return;
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.document.uri.toString() !== params.uri) return;
  if (streaming.onPartial(params)) {
    void vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
  }
}

async function startClient(): Promise<void> {
  streaming = undefined;
  serverFailed = false;
  client = createClient();
  client.onNotification(PARTIAL_METHOD, onPartial);
  try {
    await client.start();
  } catch (error) {
    serverFailed = true;
    report(startFailureMessage(settings.serverPath, error));
  }
  await refreshStats();
}

async function stopClient(): Promise<void> {
  streaming?.cancel();
  const running = client;
  client = undefined;
  // A client that failed to start cannot be stopped (the language client throws): nothing runs.
  if (running && running.state !== State.Stopped) await running.stop().catch((error) => output.warn(`stop: ${error}`));
}

async function showStats(): Promise<void> {
  await refreshStats();
  if (!lastStats) {
    void vscode.window.showWarningMessage("codespec: the server is not running (see the codespec output channel)");
    return;
  }
  output.info(`codespec/stats`);
  output.appendLine(JSON.stringify(lastStats, null, 2));
  const summary = statsSummary(lastStats);
  const choice = await vscode.window.showInformationMessage(summary.join(" | "), "Show details");
  if (choice) output.show(true);
}

async function toggle(): Promise<void> {
  await vscode.workspace.getConfiguration("codespec").update("enabled", !settings.enabled, vscode.ConfigurationTarget.Global);
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  settings = currentSettings();
  output = vscode.window.createOutputChannel("codespec", { log: true });
  statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  statusItem.command = "codespec.showStats";
  statusItem.show();
  context.subscriptions.push(
    output,
    statusItem,
    vscode.commands.registerCommand("codespec.toggle", toggle),
    vscode.commands.registerCommand("codespec.showStats", showStats),
    vscode.commands.registerCommand("codespec.restart", async () => {
      await stopClient();
      await startClient();
    }),
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (!event.affectsConfiguration("codespec")) return;
      const before = settings;
      settings = currentSettings();
      if (before.statsIntervalSeconds !== settings.statsIntervalSeconds) scheduleStats();
      if (!settings.enabled) streaming?.cancel();
      if (SERVER_SETTINGS.some((key) => event.affectsConfiguration(`codespec.${key}`))) {
        await stopClient();
        await startClient();
      } else {
        await refreshStats();
      }
    }),
    { dispose: () => statsTimer && clearInterval(statsTimer) },
  );
  scheduleStats();
  await startClient();
}

export async function deactivate(): Promise<void> {
  await stopClient();
}
