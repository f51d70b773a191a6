// Generates src/gen/ from the repository's proto/ (the single source of the API) with buf
// and ts-proto, both installed by `npm ci`. Run by `npm run build`.
import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const buf = join(root, "node_modules", ".bin", "buf");
rmSync(join(root, "src", "gen"), { recursive: true, force: true });
execFileSync(buf, ["generate", join(root, "..", "..", "proto"), "--template", "buf.gen.yaml", "--path", join(root, "..", "..", "proto", "orbit", "v1")], {
  cwd: root,
  stdio: "inherit",
});
