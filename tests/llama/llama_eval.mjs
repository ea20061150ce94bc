// llama_eval.mjs: a real llama.cpp (node-llama-cpp's prebuilt CPU build,
// pinned in package.json) on GGUF models, driven by token ids so that no
// tokenizer stands in the way.
//
//   node tests/llama/llama_eval.mjs JOBS.json > OUT.json
//
// JOBS: {"jobs": [{"model": "m.gguf", "lora": "a.gguf" (optional),
//          "lora_scale": 1, "vocab_only": false,
//          "runs": [{"tokens": [ids], "logits_at": [positions], "greedy": N}],
//          "tokenize": ["text", ...], "tokenize_nfc": false}]}
// OUT:  {"llama_cpp": "release tag", "results": [{"runs": [{"logits":
//          [[V floats] per position of logits_at], "greedy": [N ids]}],
//          "tokenize": [[ids] per text], "tokenize_nfc": [[ids] of each text
//          after String.normalize("NFC"), when asked], "bos": id|null, "eos": id|null,
//          "add_bos": bool}, or {"error": message} when llama.cpp cannot load the model]}
//
// Logits are llama.cpp's raw logits: a temperature-0 sampler chain is the
// greedy sampler alone, which leaves them as they are. The KV cache is F32
// (node-llama-cpp's default F16 cache adds ~2e-3 of logit noise) and flash
// attention is off. Tokenization is llama_tokenize with add_special = false
// and parse_special = true, as lmtune encodes a prompt's text.
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const spec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
const info = JSON.parse(fs.readFileSync(new URL("./node_modules/node-llama-cpp/llama/llama.cpp.info.json",
  import.meta.url), "utf8"));
// One thread: ggml's workers meet at spinning barriers, and on a shared,
// oversubscribed machine each barrier can wait a scheduler time slice
// (a 32-token greedy run took 4 s with 2 threads, 12 ms with one).
const threads = Number(process.env.LLAMA_THREADS || 1);

async function runOne(context, run) {
  const seq = context.getSequence();
  const want = new Set(run.logits_at || []);
  const n = run.tokens.length;
  // the last prompt position also picks the first greedy token
  const input = run.tokens.map((t, i) => (want.has(i) || (i === n - 1 && run.greedy)
    ? [t, { generateNext: { logits: want.has(i), token: true } }] : t));
  const res = await seq.controlledEvaluate(input);
  const logits = [];
  for (const pos of run.logits_at || []) {
    const m = res[pos]?.next?.logits;
    if (!m) throw new Error(`no logits at position ${pos}`);
    const row = new Array(m.size);
    for (const [tok, v] of m) row[tok] = v;
    logits.push(row);
  }
  const greedy = [];
  if (run.greedy) {
    let tok = res[n - 1].next.token;
    for (let k = 0; k < run.greedy; k++) {
      greedy.push(tok);
      if (k + 1 === run.greedy) break;
      const r = await seq.controlledEvaluate([[tok, { generateNext: { token: true } }]]);
      tok = r[0].next.token;
    }
  }
  seq.dispose();
  return { logits, greedy };
}

const results = [];
for (const job of spec.jobs) {
  let model;
  try {
    model = await llama.loadModel({ modelPath: job.model, gpuLayers: 0, vocabOnly: !!job.vocab_only });
  } catch (e) {
    // a file this llama.cpp cannot load (an unknown architecture): the job's
    // answer is the error, for the test to report
    results.push({ error: String(e?.message ?? e) });
    continue;
  }
  const out = { bos: model.tokens.bos ?? null, eos: model.tokens.eos ?? null,
                add_bos: model.tokens.shouldPrependBosToken };
  if (job.tokenize) out.tokenize = job.tokenize.map((t) => Array.from(model.tokenize(t, true)));
  if (job.tokenize && job.tokenize_nfc)
    out.tokenize_nfc = job.tokenize.map((t) => Array.from(model.tokenize(t.normalize("NFC"), true)));
  if (job.runs && job.runs.length) {
    const len = Math.max(...job.runs.map((r) => r.tokens.length + (r.greedy || 0))) + 8;
    const context = await model.createContext({
      contextSize: Math.max(64, len),
      batchSize: Math.max(64, len),
      sequences: 1,
      threads,
      flashAttention: false,
      experimentalKvCacheKeyType: "F32",
      experimentalKvCacheValueType: "F32",
      lora: job.lora ? { adapters: [{ filePath: job.lora, scale: job.lora_scale ?? 1 }] } : undefined,
    });
    out.runs = [];
    for (const run of job.runs) out.runs.push(await runOne(context, run));
    await context.dispose();
  }
  await model.dispose();
  results.push(out);
}
process.stdout.write(JSON.stringify({ llama_cpp: info.tag, results }) + "\n");
