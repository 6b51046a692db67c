// Node's `fs`, with a `globSync` that says it needs Node 22 where Node has none.
import fs from "node:fs";

export * from "node:fs";
export default fs;
export const globSync =
  fs.globSync ??
  (() => {
    throw new Error("fs.globSync needs Node.js 22 or later");
  });
