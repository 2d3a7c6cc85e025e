// What the user is told when the server cannot start, stops, or sends malformed messages, and when it is
// restarted: each failure is said once, in one message that names the cause and where to look.
// No `vscode` import: unit-tested with `node --test`.

export const MAX_RESTARTS = 4; // within RESTART_WINDOW_MS; one more stop and the server stays stopped
export const RESTART_WINDOW_MS = 3 * 60 * 1000;
export const MAX_CONNECTION_ERRORS = 3; // malformed messages in a row before the server is stopped

const OUTPUT_HINT = "the codespec output channel has the server's log";

export interface CloseDecision {
  restart: boolean;
  message?: string;
}

export interface ErrorDecision {
  shutdown: boolean;
  message?: string;
}

/** One per language client: its crashes and malformed messages. */
export class ServerWatch {
  private stops: number[] = [];
  private troubleReported = false;

  constructor(private readonly now: () => number = Date.now) {}

  /** The connection closed without the extension stopping it. `wasRunning`: the server had answered
   * `initialize`; a server that never did failed to start, which the start's caller reports. */
  closed(wasRunning: boolean): CloseDecision {
    if (!wasRunning) return { restart: false };
    const now = this.now();
    this.stops = this.stops.filter((time) => now - time <= RESTART_WINDOW_MS);
    this.stops.push(now);
    if (this.stops.length > MAX_RESTARTS) {
      return {
        restart: false,
        message: `codespec: the server stopped ${this.stops.length} times within 3 minutes and is not restarted again; ${OUTPUT_HINT}. "codespec: Restart Server" starts it.`,
      };
    }
    return { restart: true, message: `codespec: the server stopped unexpectedly and is being restarted; ${OUTPUT_HINT}.` };
  }

  /** Reading or writing a message failed (a frame that is not JSON-RPC). `count`: such errors in a row. */
  connectionError(count: number | undefined): ErrorDecision {
    if (!(count && count <= MAX_CONNECTION_ERRORS)) {
      return { shutdown: true, message: `codespec: the server keeps sending malformed messages and was stopped; ${OUTPUT_HINT}.` };
    }
    const message = this.once(`codespec: the server sent a malformed message (ignored); ${OUTPUT_HINT}.`);
    return message ? { shutdown: false, message } : { shutdown: false };
  }

  /** `message` if no trouble with the server's messages or answers was reported yet (one message per server:
   * a server that answers garbage does so on every keystroke). */
  once(message: string): string | undefined {
    if (this.troubleReported) return undefined;
    this.troubleReported = true;
    return message;
  }
}

/** A restart after a crash that did not come up (the language client restarts on its own). */
export const RESTART_FAILED_MESSAGE = `codespec: the server stopped and could not be started again; ${OUTPUT_HINT}. "codespec: Restart Server" tries again.`;

/** Why `command` could not be started, in words. */
export function startFailureMessage(command: string, error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  let reason = text;
  if (/ENOENT/.test(text)) reason = "no such file";
  else if (/EACCES/.test(text)) reason = "not executable";
  else if (/connection got disposed|connection.*closed/i.test(text)) reason = "it exited during start-up";
  return `codespec: could not start the server \`${command}\` (${reason}). Set "codespec.server.path" to the codespec executable (and "codespec.server.args"); ${OUTPUT_HINT}.`;
}

/** An inline completion request that failed: the server's error, or an answer that is not an inline completion. */
export function failedAnswerMessage(error: unknown): string {
  const text = (error instanceof Error ? error.message : String(error)).slice(0, 200);
  const code = (error as { code?: unknown } | undefined)?.code;
  const what = typeof code === "number" ? `the server answered error ${code}: ${text}` : `its answer is not an inline completion: ${text}`;
  return `codespec: a suggestion request failed (${what}); nothing is shown for it, and later failures are only logged; ${OUTPUT_HINT}.`;
}
