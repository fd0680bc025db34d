// A client on the official TypeScript ACP SDK (ClientSideConnection).
// Usage: node client.mjs PROMPTS_JSON -- AGENT_CMD [ARGS...]
// Spawns the agent command (the proxy, in the tests), initializes, opens one session, calls the
// extension method _ext.example/hello, sends each prompt in turn (an error answer is kept and the
// next prompt goes on), and prints one JSON summary line on stdout: what came back.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [promptsJson, separator, command, ...args] = process.argv.slice(2);
if (separator !== "--" || !command) {
  console.error("usage: node client.mjs PROMPTS_JSON -- AGENT_CMD [ARGS...]");
  process.exit(2);
}
const prompts = JSON.parse(promptsJson);
const summary = { chunks: [], turns: [], permissions: 0, reads: [], askedExt: [], ext: null };

class Client {
  async sessionUpdate(params) {
    const update = params.update;
    if (update.sessionUpdate === "agent_message_chunk" && update.content.type === "text") {
      summary.chunks.push(update.content.text);
    }
  }
  async requestPermission(params) {
    summary.permissions += 1;
    const allow = params.options.find((option) => option.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  }
  async readTextFile(params) {
    summary.reads.push(params.path);
    return { content: "from-the-ts-client" };
  }
  async writeTextFile() {
    return {};
  }
  async extMethod(method, params) {
    summary.askedExt.push(method);
    return { ok: true, method, got: params };
  }
  async extNotification() {}
}

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const connection = new acp.ClientSideConnection(() => new Client(), stream);
try {
  const init = await connection.initialize({
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
    clientInfo: { name: "ts-sdk-client", version: "1.0" },
  });
  summary.protocolVersion = init.protocolVersion;
  summary.agentMeta = init.agentCapabilities?._meta ?? null;
  const session = await connection.newSession({ cwd: process.cwd(), mcpServers: [] });
  summary.sessionId = session.sessionId;
  try {
    summary.ext = await connection.extMethod("_ext.example/hello", { a: 1 });
  } catch (error) {
    summary.ext = { errorCode: error.code };
  }
  for (const text of prompts) {
    try {
      const answer = await connection.prompt({
        sessionId: session.sessionId,
        prompt: [{ type: "text", text }],
      });
      summary.turns.push(answer.stopReason);
    } catch (error) {
      // A prompt answered with an error (an agent crash, through the proxy) is kept, and the
      // next prompt goes to the same session.
      summary.turns.push({ code: error.code ?? null, message: error.message, data: error.data ?? null });
    }
  }
} catch (error) {
  summary.error = { message: String(error?.message ?? error), code: error?.code ?? null };
}
child.stdin.end();
const code = await new Promise((resolve) => child.on("exit", (c) => resolve(c)));
summary.agentExit = code;
process.stdout.write(JSON.stringify(summary) + "\n");
