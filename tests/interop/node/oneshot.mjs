// The one-shot a TypeScript-SDK client does, for scripts/bench/oneshot.py: spawn the agent,
// initialize, open a session, send one prompt, print the agent's text, close stdin and wait for
// the agent's exit. What `acp-bridge run -m TEXT -- AGENT` does, with nothing else.
// Usage: node oneshot.mjs TEXT -- AGENT_CMD [ARGS...]
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [text, separator, command, ...args] = process.argv.slice(2);
if (separator !== "--" || !command) {
  console.error("usage: node oneshot.mjs TEXT -- AGENT_CMD [ARGS...]");
  process.exit(2);
}
const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
let reply = "";
const connection = new acp.ClientSideConnection(
  () => ({
    async sessionUpdate(params) {
      const update = params.update;
      if (update.sessionUpdate === "agent_message_chunk" && update.content.type === "text") {
        reply += update.content.text;
      }
    },
    async requestPermission() {
      return { outcome: { outcome: "cancelled" } };
    },
  }),
  stream,
);
await connection.initialize({ protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
const session = await connection.newSession({ cwd: process.cwd(), mcpServers: [] });
const answer = await connection.prompt({
  sessionId: session.sessionId,
  prompt: [{ type: "text", text }],
});
process.stdout.write(reply + "\n");
child.stdin.end();
await new Promise((resolve) => child.on("exit", resolve));
process.exit(answer.stopReason === "end_turn" ? 0 : 4);
