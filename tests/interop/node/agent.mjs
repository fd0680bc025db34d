// An agent on the official TypeScript ACP SDK (AgentSideConnection), on stdio.
// initialize (loadSession false, a _meta capability), session/new, session/prompt: the prompt's
// words streamed back as agent_message_chunk updates, then end_turn. A prompt starting with
// "permission" first asks the client for permission and reports the outcome as a chunk.
// _ext.example/hello (extension request): answered {"echo": params}.
import { Readable, Writable } from "node:stream";
import { randomUUID } from "node:crypto";
import * as acp from "@agentclientprotocol/sdk";

class Agent {
  constructor(connection) {
    this.connection = connection;
    this.cancelled = new Set();
  }
  async initialize() {
    return {
      protocolVersion: acp.PROTOCOL_VERSION,
      agentCapabilities: { loadSession: false, _meta: { "ts.example": { ok: true } } },
      agentInfo: { name: "ts-sdk-agent", version: "1.0" },
    };
  }
  async newSession() {
    return { sessionId: `ts-${randomUUID()}` };
  }
  async authenticate() {
    return {};
  }
  async cancel(params) {
    this.cancelled.add(params.sessionId);
  }
  async extMethod(method, params) {
    return { echo: params, method };
  }
  async extNotification() {}
  async prompt(params) {
    const sessionId = params.sessionId;
    this.cancelled.delete(sessionId);
    const text = params.prompt.map((block) => block.text ?? "").join(" ");
    if (text.startsWith("permission")) {
      const answer = await this.connection.requestPermission({
        sessionId,
        toolCall: { toolCallId: "call-1", title: "Edit a file", kind: "edit", status: "pending" },
        options: [
          { optionId: "no", name: "No", kind: "reject_once" },
          { optionId: "yes", name: "Yes", kind: "allow_once" },
        ],
      });
      await this.chunk(sessionId, `permission ${answer.outcome.optionId ?? answer.outcome.outcome}`);
    }
    for (const word of text.split(/\s+/).filter(Boolean)) {
      if (this.cancelled.has(sessionId)) {
        return { stopReason: "cancelled" };
      }
      await this.chunk(sessionId, word + " ");
    }
    return { stopReason: "end_turn" };
  }
  async chunk(sessionId, text) {
    await this.connection.sessionUpdate({
      sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
    });
  }
}

const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
new acp.AgentSideConnection((connection) => new Agent(connection), stream);
