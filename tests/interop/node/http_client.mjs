// A client on the TypeScript ACP SDK 2.4.0's own Streamable HTTP transport: createHttpStream
// from "@agentclientprotocol/sdk/experimental/http-client" (installed under the alias
// acp-sdk-2.4), on Node's global fetch.
// Usage: node http_client.mjs URL [TOKEN]
// Initializes, opens one session, prompts once, and prints one JSON summary line on stdout:
// what came back, or {"error": ...} when the connection or a request failed.
import { client, methods, PROTOCOL_VERSION } from "acp-sdk-2.4";
import { createHttpStream } from "acp-sdk-2.4/experimental/http-client";

const [url, token] = process.argv.slice(2);
if (!url) {
  console.error("usage: node http_client.mjs URL [TOKEN]");
  process.exit(2);
}
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const summary = {};
try {
  const stream = createHttpStream(url, { headers });
  await client({ name: "ts-sdk-http-client" }).connectWith(stream, async (ctx) => {
    const init = await ctx.request(methods.agent.initialize, {
      protocolVersion: PROTOCOL_VERSION,
      clientCapabilities: {},
      clientInfo: { name: "ts-sdk-http-client", version: "2.4.0" },
    });
    summary.protocolVersion = init.protocolVersion;
    summary.agentName = init.agentInfo?.name ?? null;
    const builder = ctx.buildSession({ cwd: process.cwd(), mcpServers: [] });
    await builder.withSession(async (session) => {
      summary.sessionId = session.sessionId;
      const turn = session.prompt("hello");
      summary.text = await session.readText();
      summary.stopReason = (await turn).stopReason;
    });
  });
} catch (error) {
  summary.error = String(error?.message ?? error);
}
console.log(JSON.stringify(summary));
process.exit(0);
