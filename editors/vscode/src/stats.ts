// codespec/stats (lsp/stats.py) -> status bar text and a readable summary. No `vscode` import.

export interface LatencyStats {
  count?: number;
  p50?: number | null;
  p90?: number | null;
  p99?: number | null;
}

export interface ServerStats {
  requests?: number;
  answered?: number;
  cancelled?: number;
  superseded?: number;
  shown?: number;
  accepted?: number;
  rejected?: number;
  acceptanceRate?: number | null;
  latencyMs?: LatencyStats;
  generations?: { tau?: number | null; draftAcceptanceRate?: number | null };
  engine?: { loaded?: boolean; model?: string; draftModel?: string | null; drafting?: string };
}

export const STATS_METHOD = "codespec/stats";

function ms(value: number | null | undefined): string {
  return typeof value === "number" ? `${Math.round(value)} ms` : "–";
}

function percent(value: number | null | undefined): string {
  return typeof value === "number" ? `${Math.round(value * 100)}%` : "–";
}

/** The status bar item: "$(sparkle) 42 ms · 63%", or why there is nothing to show (`failed`: the server
 * is not running and is not being started). */
export function statusText(stats: ServerStats | undefined, enabled: boolean, failed = false): string {
  if (!enabled) return "$(circle-slash) codespec";
  if (!stats) return failed ? "$(error) codespec: not running" : "$(sync~spin) codespec";
  if (stats.engine && stats.engine.loaded === false) return "$(loading~spin) codespec: loading model";
  const latency = stats.latencyMs?.p50;
  if (typeof latency !== "number") return "$(sparkle) codespec";
  return `$(sparkle) ${ms(latency)} · ${percent(stats.acceptanceRate)}`;
}

/** Multi-line summary for the tooltip and the "Show Stats" command. */
export function statsSummary(stats: ServerStats): string[] {
  const latency = stats.latencyMs ?? {};
  const lines = [
    `latency p50 ${ms(latency.p50)} · p90 ${ms(latency.p90)} · p99 ${ms(latency.p99)} (${latency.count ?? 0} answers)`,
    `acceptance ${percent(stats.acceptanceRate)} (${stats.accepted ?? 0} accepted of ${stats.shown ?? 0} shown, ${stats.rejected ?? 0} rejected)`,
    `requests ${stats.requests ?? 0}: ${stats.answered ?? 0} answered, ${stats.cancelled ?? 0} cancelled, ${stats.superseded ?? 0} superseded`,
  ];
  const tau = stats.generations?.tau;
  if (typeof tau === "number") lines.push(`tau ${tau.toFixed(2)} tokens per target forward`);
  if (stats.engine) {
    const draft = stats.engine.draftModel ? `, draft ${stats.engine.draftModel}` : "";
    lines.push(`model ${stats.engine.model ?? "?"}${draft} (${stats.engine.loaded ? "loaded" : "not loaded"})`);
  }
  return lines;
}
