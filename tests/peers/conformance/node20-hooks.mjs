// Resolves the suite's own `fs` to `fs-shim.mjs` (see node20.mjs); nothing else changes.
const shim = new URL("./fs-shim.mjs", import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  const fromSuite = context.parentURL?.includes("/@modelcontextprotocol/conformance/");
  if (fromSuite && (specifier === "fs" || specifier === "node:fs")) {
    return { url: shim, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
