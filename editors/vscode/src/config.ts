// Settings -> how the server is launched and what it is told at `initialize`.
// No `vscode` import: unit-tested with `node --test`.

export interface CodespecSettings {
  enabled: boolean;
  serverPath: string;
  serverArgs: string[];
  model: string;
  draftModel: string;
  drafting: string;
  device: string;
  engine: string;
  engineModel: string;
  streaming: boolean;
  statsIntervalSeconds: number;
}

export const DEFAULT_SETTINGS: CodespecSettings = {
  enabled: true,
  serverPath: "codespec",
  serverArgs: ["serve", "--stdio"],
  model: "",
  draftModel: "",
  drafting: "",
  device: "",
  engine: "",
  engineModel: "",
  streaming: false,
  statsIntervalSeconds: 5,
};

const DRAFTING_MODES = ["none", "lookup", "model", "both"];

/** Settings whose change needs the server restarted (the rest apply live). */
export const SERVER_SETTINGS = ["server.path", "server.args", "model", "draftModel", "draft", "drafting", "device", "engine", "engineModel", "streaming"];

/** Read settings through `get(key)` (a WorkspaceConfiguration for section "codespec"), keeping only
 * values of the right type so that a bad settings.json cannot launch a broken command line. */
export function readSettings(get: (key: string) => unknown): CodespecSettings {
  const text = (key: string, fallback: string): string => {
    const value = get(key);
    return typeof value === "string" ? value.trim() : fallback;
  };
  const args = get("server.args");
  const interval = get("statsIntervalSeconds");
  const enabled = get("enabled");
  const streaming = get("streaming");
  return {
    enabled: typeof enabled === "boolean" ? enabled : DEFAULT_SETTINGS.enabled,
    serverPath: text("server.path", DEFAULT_SETTINGS.serverPath) || DEFAULT_SETTINGS.serverPath,
    serverArgs:
      Array.isArray(args) && args.every((arg) => typeof arg === "string") ? [...args] : [...DEFAULT_SETTINGS.serverArgs],
    model: text("model", ""),
    // `codespec.draft` is the deprecated spelling of `codespec.draftModel` (one release).
    draftModel: text("draftModel", "") || text("draft", ""),
    drafting: DRAFTING_MODES.includes(text("drafting", "")) ? text("drafting", "") : "",
    device: text("device", ""),
    engine: text("engine", ""),
    engineModel: text("engineModel", ""),
    streaming: typeof streaming === "boolean" ? streaming : DEFAULT_SETTINGS.streaming,
    statsIntervalSeconds:
      typeof interval === "number" && Number.isFinite(interval) && interval >= 1 ? interval : DEFAULT_SETTINGS.statsIntervalSeconds,
  };
}

export interface ServerLaunch {
  command: string;
  args: string[];
}

export function serverLaunch(settings: CodespecSettings): ServerLaunch {
  return { command: settings.serverPath, args: [...settings.serverArgs] };
}

/** initializationOptions in the server's names (lsp/options.py); unset settings are left out so
 * that the server's own defaults (or its command-line flags) apply. */
export function initializationOptions(settings: CodespecSettings): Record<string, string | boolean> {
  const options: Record<string, string | boolean> = { streaming: settings.streaming };
  if (settings.model) options.model = settings.model;
  if (settings.draftModel) options.draftModel = settings.draftModel;
  if (settings.drafting) options.drafting = settings.drafting;
  if (settings.device) options.device = settings.device;
  if (settings.engine) options.engine = settings.engine;
  if (settings.engineModel) options.engineModel = settings.engineModel;
  return options;
}
