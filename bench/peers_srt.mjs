// The bench's driver of Anthropic's sandbox runtime, embedded as Claude Code embeds it
// (bench/peers.py): its proxies started once, then one sandboxed `cat FILE` for each line
// read on standard input, answered with one line once the command has ended.
// Run as `node peers_srt.mjs PACKAGE_DIR FOLDER`; never part of boxmaker itself.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const [packageDir, folder] = process.argv.slice(2);
const { SandboxManager } = await import(pathToFileURL(`${packageDir}/dist/index.js`).href);
await SandboxManager.initialize({
  network: { allowedDomains: [], deniedDomains: [] },
  filesystem: { denyRead: [], allowWrite: [folder], denyWrite: [] },
});
process.stdout.write("ready\n");

for await (const path of createInterface({ input: process.stdin })) {
  const command = await SandboxManager.wrapWithSandbox(`cat ${path}`);
  const child = spawn(command, { shell: true, stdio: ["ignore", "pipe", "inherit"] });
  let size = 0;
  child.stdout.on("data", (chunk) => { size += chunk.length; });
  const code = await new Promise((done) => child.on("close", done));
  process.stdout.write(`${code} ${size}\n`);
}
await SandboxManager.reset();
