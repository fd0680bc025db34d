// A client on the official TypeScript ACP SDK (ClientSideConnection) that prints what `acp-bridge
// run --json` prints for one turn: one JSON line per event on stdout.
// Usage: node print_client.mjs TEXT -- AGENT_CMD [ARGS...]
// Spawns the agent, initializes, opens a session, prompts TEXT once and writes every
// session/update as {"event":"update","ts":...,"sessionId":...,"update":...}, then
// {"event":"turn_ended",...}; closes the agent's stdin and waits for its exit, as `run` does.
// scripts/bench/bench_json_render.py times it beside `acp-bridge run --json`.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [text, separator, command, ...args] = process.argv.slice(2);
if (separator !== "--" || !command) {
  console.error("usage: node print_client.mjs TEXT -- AGENT_CMD [ARGS...]");
  process.exit(2);
}

const print = (event) => process.stdout.write(JSON.stringify({ ts: Date.now() / 1000, ...event }) + "\n");

class Client {
  async sessionUpdate(params) {
    print({ event: "update", sessionId: params.sessionId, update: params.update });
  }
  async requestPermission(params) {
    const reject = params.options.find((option) => option.kind === "reject_once");
    return { outcome: { outcome: "selected", optionId: reject.optionId } };
  }
}

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const connection = new acp.ClientSideConnection(() => new Client(), stream);
const started = Date.now();
const init = await connection.initialize({
  protocolVersion: acp.PROTOCOL_VERSION,
  clientCapabilities: {},
  clientInfo: { name: "ts-sdk-print-client", version: "1.0" },
});
print({ event: "agent_started", pid: child.pid, agentInfo: init.agentInfo ?? null });
const session = await connection.newSession({ cwd: process.cwd(), mcpServers: [] });
print({ event: "session", sessionId: session.sessionId, how: "new" });
print({ event: "turn_started", seq: 1, text });
const answer = await connection.prompt({
  sessionId: session.sessionId,
  prompt: [{ type: "text", text }],
});
print({ event: "turn_ended", seq: 1, stopReason: answer.stopReason, duration_ms: Date.now() - started });
child.stdin.end();
await new Promise((resolve) => child.on("exit", resolve));
process.exitCode = 0;
