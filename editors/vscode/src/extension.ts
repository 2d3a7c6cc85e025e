// VS Code glue: the language client (inline completion is built into vscode-languageclient 11),
// the status bar, the commands, and streaming re-triggers. The logic lives in config.ts, stats.ts
// and streaming.ts, which do not import `vscode`.
import * as vscode from "vscode";
import { LanguageClient, LanguageClientOptions, ServerOptions, State } from "vscode-languageclient/node";

import { CodespecSettings, initializationOptions, readSettings, SERVER_SETTINGS, serverLaunch } from "./config";
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
  if (!settings.streaming) return next(document, position, context, token);
  streaming ??= new StreamingRequests<InlineResult>();
  const answer = streaming.provide(placeKey(document.uri.toString(), document.version, position), () => {
    // Our own cancellation: a re-trigger must not cancel the generation it is streaming.
    const source = new vscode.CancellationTokenSource();
    const promise = Promise.resolve(next(document, position, context, source.token)).finally(() => source.dispose());
    return { promise, cancel: () => source.cancel() };
  });
  if ("partial" in answer) {
    return [new vscode.InlineCompletionItem(answer.partial, new vscode.Range(position, position))];
  }
  return answer.result;
}

function createClient(): LanguageClient {
  const launch = serverLaunch(settings);
  const serverOptions: ServerOptions = { command: launch.command, args: launch.args, options: { env: process.env } };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    initializationOptions: initializationOptions(settings),
    outputChannel: output,
    middleware: { provideInlineCompletionItems: provideInline },
  };
  return new LanguageClient("codespec", "codespec", serverOptions, clientOptions);
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
  statusItem.text = statusText(lastStats, settings.enabled);
  statusItem.tooltip = lastStats ? statsSummary(lastStats).join("\n") : "codespec: starting";
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
  client = createClient();
  client.onNotification(PARTIAL_METHOD, onPartial);
  try {
    await client.start();
  } catch (error) {
    void vscode.window.showErrorMessage(
      `codespec: could not start \`${settings.serverPath}\` (${error}). Set "codespec.server.path" to the codespec executable.`,
    );
  }
  await refreshStats();
}

async function stopClient(): Promise<void> {
  streaming?.cancel();
  const running = client;
  client = undefined;
  if (running) await running.stop();
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
