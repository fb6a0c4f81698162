// Generates src/schema.d.ts from the API's OpenAPI document, or (--check)
// generates it to a temporary file and fails when it differs from the
// checked-in one. The one place the generator's options are written.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const spec = resolve(here, "../../docs/openapi.yaml");
const checkedIn = resolve(here, "src/schema.d.ts");
const generator = resolve(here, "node_modules/openapi-typescript/bin/cli.js");
// `{type: object}` without properties (a specification, its parameters) is a
// map of anything, not an object that must stay empty.
const options = ["--empty-objects-unknown"];

function generate(output) {
  execFileSync(process.execPath, [generator, spec, ...options, "--output", output], {
    stdio: ["ignore", "ignore", "inherit"],
  });
}

if (!process.argv.includes("--check")) {
  generate(checkedIn);
  process.exit(0);
}

const dir = mkdtempSync(join(tmpdir(), "genace-schema-"));
try {
  const fresh = join(dir, "schema.d.ts");
  generate(fresh);
  const want = readFileSync(fresh, "utf8");
  let have = "";
  try {
    have = readFileSync(checkedIn, "utf8");
  } catch {
    have = "";
  }
  if (want !== have) {
    const a = have.split("\n");
    const b = want.split("\n");
    let line = 0;
    while (line < a.length && line < b.length && a[line] === b[line]) line++;
    console.error(
      `check:types: ${relative(process.cwd(), checkedIn)} is out of date with ${relative(process.cwd(), spec)} ` +
        `(first difference at line ${line + 1}).\n` +
        `  checked in: ${JSON.stringify(a[line] ?? "<end of file>")}\n` +
        `  generated:  ${JSON.stringify(b[line] ?? "<end of file>")}\n` +
        `Run \`npm run generate\` in clients/typescript and commit src/schema.d.ts.`,
    );
    process.exit(1);
  }
  console.log("check:types: src/schema.d.ts matches docs/openapi.yaml");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
