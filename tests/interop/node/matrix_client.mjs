// An interop client on the official TypeScript ACP SDK (ClientSideConnection), for
// scripts/interop.py: the same scenario and the same JSON verdicts as tests/interop/sdk_client.py.
// Usage: node matrix_client.mjs SCENARIO_JSON -- AGENT_CMD [ARGS...]
// Scenario: hello (a prompt whose answer streams text), expect (text the answer must contain),
// slow (a prompt long enough to cancel, or null), load (session/load in a second process when
// the agent offers it), cwd, timeout (seconds per step). Prints one line:
// {"checks": {NAME: {"ok", "detail"}}, "info": {...}}; a check not attempted is absent.
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [scenarioJson, separator, command, ...args] = process.argv.slice(2);
if (separator !== "--" || !command) {
  console.error("usage: node matrix_client.mjs SCENARIO_JSON -- AGENT_CMD [ARGS...]");
  process.exit(2);
}
const scenario = JSON.parse(scenarioJson);
const checks = {};
const info = {};
let step = "initialize";

const verdict = (ok, detail) => ({ ok, detail: String(detail).slice(0, 400) });

function within(promise, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${scenario.timeout} s`)), scenario.timeout * 1000);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

class Recorder {
  constructor() {
    this.reset();
  }
  reset() {
    this.chunks = [];
    this.firstChunk = new Promise((resolve) => (this.sawChunk = resolve));
  }
  async sessionUpdate(params) {
    const update = params.update;
    if (update.sessionUpdate === "agent_message_chunk" && update.content.type === "text") {
      this.chunks.push(update.content.text);
      this.sawChunk();
    }
  }
  async requestPermission() {
    return { outcome: { outcome: "cancelled" } };
  }
}

function open() {
  const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"], cwd: scenario.cwd });
  const recorder = new Recorder();
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const connection = new acp.ClientSideConnection(() => recorder, stream);
  const pid = child.pid;
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  const close = async () => {
    child.stdin.end();
    return within(exited, "agent exit after stdin EOF");
  };
  return { connection, recorder, close, pid };
}

async function initialize(connection, into) {
  const init = await within(
    connection.initialize({
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {},
      clientInfo: { name: "interop-ts-client", version: "1" },
    }),
    "initialize",
  );
  into.agentInfo = init.agentInfo ?? null;
  into.loadSession = Boolean(init.agentCapabilities?.loadSession);
  return init;
}

async function streamedTurn(connection, recorder, sessionId, name) {
  recorder.reset();
  const answer = await within(
    connection.prompt({ sessionId, prompt: [{ type: "text", text: scenario.hello }] }),
    "session/prompt",
  );
  const text = recorder.chunks.join("");
  const ok = answer.stopReason === "end_turn" && text.includes(scenario.expect) && recorder.chunks.length > 0;
  const detail = `${answer.stopReason}, ${recorder.chunks.length} chunks: ${JSON.stringify(text.slice(0, 120))}`;
  checks[name] = verdict(ok, ok ? detail : `expected ${JSON.stringify(scenario.expect)}; ${detail}`);
}

async function cancelledTurn(connection, recorder, sessionId) {
  recorder.reset();
  const turn = connection.prompt({ sessionId, prompt: [{ type: "text", text: scenario.slow }] });
  // An agent that says nothing before it answers (fast-agent's slow model) is cancelled anyway.
  await Promise.race([recorder.firstChunk, new Promise((resolve) => setTimeout(resolve, 1000))]);
  await connection.cancel({ sessionId });
  const answer = await within(turn, "the cancelled prompt");
  checks.cancel = verdict(answer.stopReason === "cancelled", `stopReason ${answer.stopReason} after ${recorder.chunks.length} chunks`);
}

// The processes whose parent is `pid`, from /proc (Linux): [pid, state] pairs.
function childrenOf(pid) {
  const found = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[1]) === pid) found.push([Number(entry), fields[0]]);
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

// SIGKILL the agent under the proxy, wait (bounded) until the proxy reaped it, then prompt the
// same session: the proxy must have restarted the agent and restored the session. A prompt the
// crash cut is answered with a recoverable error: prompted again once, as an editor would.
async function restartedTurn(first, sessionId) {
  const victims = childrenOf(first.pid);
  if (victims.length !== 1) {
    checks.restart = verdict(false, `expected one agent under the proxy, found ${JSON.stringify(victims)}`);
    return;
  }
  const victim = victims[0][0];
  process.kill(victim, "SIGKILL");
  const deadline = Date.now() + scenario.timeout * 1000;
  while (childrenOf(first.pid).some(([pid, state]) => pid === victim && state !== "Z") && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  let retried = "";
  try {
    await streamedTurn(first.connection, first.recorder, sessionId, "restart");
  } catch (error) {
    if (!error?.data?.recoverable) throw error;
    retried = `first prompt cut (${String(error.message).split("\n")[0].slice(0, 80)}), prompted again; `;
    await streamedTurn(first.connection, first.recorder, sessionId, "restart");
  }
  checks.restart.detail = `agent pid ${victim} SIGKILLed; ${retried}then ${checks.restart.detail}`;
}

try {
  const first = open();
  await initialize(first.connection, info);
  checks.initialize = verdict(true, `protocol ${acp.PROTOCOL_VERSION}`);
  step = "session/new";
  const session = await within(first.connection.newSession({ cwd: scenario.cwd, mcpServers: [] }), "session/new");
  checks["session/new"] = verdict(true, session.sessionId);
  step = "stream";
  await streamedTurn(first.connection, first.recorder, session.sessionId, "stream");
  if (scenario.slow) {
    step = "cancel";
    await cancelledTurn(first.connection, first.recorder, session.sessionId);
  }
  if (scenario.restart) {
    step = "restart";
    await restartedTurn(first, session.sessionId);
  }
  info.exitCode = await first.close();
  if (scenario.load && info.loadSession) {
    step = "load";
    const second = open();
    await initialize(second.connection, {});
    await within(
      second.connection.loadSession({ cwd: scenario.cwd, sessionId: session.sessionId, mcpServers: [] }),
      "session/load",
    );
    const replayed = second.recorder.chunks.length;
    await streamedTurn(second.connection, second.recorder, session.sessionId, "load");
    checks.load.detail = `new process, ${replayed} chunks replayed; then ${checks.load.detail}`;
    await second.close();
  }
} catch (error) {
  checks[step] = verdict(false, `${error?.message ?? error}${error?.code ? ` (code ${error.code})` : ""}`);
}
process.stdout.write(JSON.stringify({ checks, info }) + "\n");
process.exit(0);
