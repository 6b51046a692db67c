// The suite (0.1.16) imports `globSync` from `fs`, which Node has from version 22 on; it
// calls it only in its report commands, never in a scenario. On an older Node this
// module, given to `node --import`, lends it the `fs` of `fs-shim.mjs`, which has one.
import { register } from "node:module";

register("./node20-hooks.mjs", import.meta.url);
