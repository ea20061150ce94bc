// tokenizer_speed.mjs: the same measurement as tokenizer_speed.c with
// @lenml/tokenizers (transformers.js): chunks at line ends near CHUNK_BYTES,
// a cold pass with a fresh tokenizer, then a warm pass.
// Usage: node bench/tokenizer_speed.mjs MODEL_DIR TEXT_FILE [CHUNK_BYTES=4096]
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(path.join(root, "tests/node/package.json"));
const { TokenizerLoader } = await import(require.resolve("@lenml/tokenizers"));

const [dir, file, chunkArg] = process.argv.slice(2);
const chunk = Number(chunkArg ?? 4096);
const buf = fs.readFileSync(file);
const chunks = [];
for (let pos = 0; pos < buf.length; ) {
  let end = Math.min(pos + chunk, buf.length);
  while (end < buf.length && buf[end - 1] !== 10) end++;
  chunks.push(buf.subarray(pos, end).toString("utf8"));
  pos = end;
}
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e3; }; // ms
const c0 = cpu();
const t0 = performance.now();
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});
const t1 = performance.now(), c1 = cpu();
const pass = () => chunks.reduce((n, c) => n + tok.encode(c, { add_special_tokens: false }).length, 0);
const nCold = pass();
const t2 = performance.now(), c2 = cpu();
pass();
const t3 = performance.now(), c3 = cpu();
const mbps = (ms) => (buf.length / 1e6 / (ms / 1e3)).toFixed(2);
const name = dir.split("-").pop();
console.log(`JS  ${name.padEnd(16)} load ${((t1 - t0) / 1e3).toFixed(2)}s (cpu ${((c1 - c0) / 1e3).toFixed(2)}s)  ${buf.length} bytes -> ${nCold} tokens  ` +
  `cold ${mbps(t2 - t1)} MB/s (cpu ${mbps(c2 - c1)})  warm ${mbps(t3 - t2)} MB/s (cpu ${mbps(c3 - c2)})`);
