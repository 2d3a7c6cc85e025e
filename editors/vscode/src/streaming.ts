// Streaming suggestions (codespec/partialCompletion) for VS Code. No `vscode` import.
//
// VS Code asks an inline completion provider again only when triggered, and cancels the previous
// call when it does. So: the LSP request for one place (uri, version, position) is kept running on
// its own cancellation, independent of VS Code's calls, while partial notifications re-trigger the
// editor; each new provider call for the same place answers at once with the text so far, and the
// final answer (with its accept command) once it has come. A call for another place cancels it.

export const PARTIAL_METHOD = "codespec/partialCompletion";

export interface Position {
  line: number;
  character: number;
}

export interface PartialCompletion {
  uri: string;
  version: number;
  position: Position;
  text: string;
  done: boolean;
}

export function placeKey(uri: string, version: number, position: Position): string {
  return `${uri}@${version}:${position.line}:${position.character}`;
}

export function isPartialCompletion(value: unknown): value is PartialCompletion {
  const p = value as PartialCompletion;
  return (
    typeof p === "object" && p !== null && typeof p.uri === "string" && typeof p.version === "number" &&
    typeof p.text === "string" && typeof p.done === "boolean" && typeof p.position?.line === "number" &&
    typeof p.position?.character === "number"
  );
}

interface Flight<T> {
  key: string;
  promise: Promise<T>;
  settled: boolean;
  result?: T;
  cancel: () => void;
  partial?: string;
}

/** One running request per place; see the module comment. */
export class StreamingRequests<T> {
  private flight: Flight<T> | undefined;

  /** What to answer a provider call for `key` with: the text so far, or the request's promise.
   * `start()` sends the request (only when none is running for `key`) and returns its promise and a
   * way to cancel it. */
  provide(key: string, start: () => { promise: Promise<T>; cancel: () => void }): { partial: string } | { result: Promise<T> } {
    let flight = this.flight;
    if (!flight || flight.key !== key) {
      this.cancel();
      const started = start();
      const created: Flight<T> = { key, promise: started.promise, settled: false, cancel: started.cancel };
      created.promise.then(
        (result) => {
          created.settled = true;
          created.result = result;
        },
        () => {
          created.settled = true;
        },
      );
      this.flight = flight = created;
    }
    if (!flight.settled && flight.partial) {
      return { partial: flight.partial };
    }
    return { result: flight.promise };
  }

  /** A partial notification: true when it belongs to the running request and should be shown
   * (the caller re-triggers the editor's inline suggestion). */
  onPartial(partial: PartialCompletion): boolean {
    const flight = this.flight;
    if (!flight || flight.key !== placeKey(partial.uri, partial.version, partial.position)) return false;
    if (partial.done) return true; // the final answer is (about to be) there: show it
    if (flight.settled || !partial.text || partial.text === flight.partial) return false;
    flight.partial = partial.text;
    return true;
  }

  /** Cancel the running request (another place, the editor closed, suggestions off). */
  cancel(): void {
    if (this.flight && !this.flight.settled) this.flight.cancel();
    this.flight = undefined;
  }

  get runningKey(): string | undefined {
    return this.flight && !this.flight.settled ? this.flight.key : undefined;
  }
}
