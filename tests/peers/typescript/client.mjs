// The stock TypeScript SDK client (session era), as a caller of the sidecar in tests.
// Usage: node client.mjs URL TOOL ARGUMENTS_JSON TIMES
// Initializes a session, calls TOOL with ARGUMENTS TIMES times, and prints one JSON line
// per call: {"cacheStatus": ..., "text": ..., "meta": ...}, the Cache-Status header of the
// response that carried the call's answer, the answer's first text item and its `_meta`. Exits non-zero on any
// failure, within the timeout given to each request.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, tool, argumentsJson, times] = process.argv.slice(2);
let lastCallStatus = null;
const transport = new StreamableHTTPClientTransport(new URL(url), {
  fetch: async (input, init) => {
    const response = await fetch(input, init);
    const body = typeof init?.body === "string" ? init.body : "";
    if (body.includes('"tools/call"')) lastCallStatus = response.headers.get("cache-status");
    return response;
  },
});
const client = new Client({ name: "typescript-client", version: "1.0.0" });
await client.connect(transport, { timeout: 10000 });
for (let i = 0; i < Number(times); i++) {
  const result = await client.callTool(
    { name: tool, arguments: JSON.parse(argumentsJson) },
    undefined,
    { timeout: 10000 },
  );
  const text = result.content?.[0]?.text ?? null;
  const meta = result._meta ?? null;
  process.stdout.write(`${JSON.stringify({ cacheStatus: lastCallStatus, text, meta })}\n`);
}
await client.close();
