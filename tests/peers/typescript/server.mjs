// The stock TypeScript SDK's Streamable HTTP server (session era), as an upstream of the
// sidecar in tests. It routes answers by JSON-RPC id the way the SDK does (ids parsed by
// JSON.parse: 1, 1.0 and 1e0 are one id). Prints {"port": N} once listening on loopback.
//
// Tool `echo`: answers {text, who, call} after `ms` milliseconds, where `who` is the
// request's Authorization header and `call` the server's count of calls so far.
// GET /calls answers that count.
import { randomUUID } from "node:crypto";
import http from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

let calls = 0;
const transports = new Map();

function mcpServer() {
  const server = new McpServer({ name: "typescript-peer", version: "1.0.0" });
  server.registerTool(
    "echo",
    { inputSchema: { text: z.string(), ms: z.number().optional() } },
    async ({ text, ms }, extra) => {
      calls += 1;
      const call = calls;
      if (ms) await new Promise((resolve) => setTimeout(resolve, ms));
      const who = extra.requestInfo?.headers?.authorization ?? null;
      return { content: [{ type: "text", text: JSON.stringify({ text, who, call }) }] };
    },
  );
  return server;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : undefined;
}

const httpServer = http.createServer(async (req, res) => {
  try {
    if (req.url === "/calls") {
      res.end(String(calls));
      return;
    }
    const body = req.method === "POST" ? await readBody(req) : undefined;
    const id = req.headers["mcp-session-id"];
    let transport = id ? transports.get(id) : undefined;
    if (!transport && req.method === "POST" && body && isInitializeRequest(body)) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: process.env.JSON_RESPONSE === "1",
        onsessioninitialized: (sessionId) => transports.set(sessionId, transport),
      });
      transport.onclose = () => transports.delete(transport.sessionId);
      await mcpServer().connect(transport);
    }
    if (!transport) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32001, message: "Session not found" } }));
      return;
    }
    await transport.handleRequest(req, res, body);
  } catch (error) {
    if (!res.headersSent) res.writeHead(500);
    res.end();
  }
});

httpServer.listen(0, "127.0.0.1", () => {
  process.stdout.write(`${JSON.stringify({ port: httpServer.address().port })}\n`);
});
process.on("SIGTERM", () => process.exit(0));
